"""The grading.yml reference is generated from its schema and kept in sync."""

from repo_project import REPO

from autograder.project.config_docs import DOCS, render


def test_docs_match_the_schema():
    assert DOCS.read_text() == render(REPO.schemas), \
        "run `autograder generate` after editing the schema"


def test_every_key_of_the_project_config_is_documented():
    text = render(REPO.schemas)
    for key in ("parts.coding.functions", "timeouts.call", "limits.memory_mb", "gpu_policy",
                "rank_retries", "parts.multiple_choice.reveal_key"):
        assert f"`assignments.ASSIGNMENT.{key}`" in text
