"""Finding the student's files in an upload folder."""

import os

from autograder.inputs.submission import locate


def make(tmp_path, *names):
    for name in names:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x = 1\n")
    return tmp_path


def test_exact_names_are_found_without_warnings(tmp_path):
    files = locate(make(tmp_path, "dp_basics.py", "answers.yml"), "dp_basics")
    assert files.module.name == "dp_basics.py" and files.answers.name == "answers.yml"
    assert files.warnings == [] and files.module_problem is None


def test_json_answers_are_accepted(tmp_path):
    assert locate(make(tmp_path, "dp_basics.py", "answers.json"), "dp_basics").answers.name == \
        "answers.json"


def test_browser_renames_are_accepted_with_a_warning(tmp_path):
    files = locate(make(tmp_path, "dp_basics (1).py", "answers (2).yml"), "dp_basics")
    assert files.module.name == "dp_basics (1).py" and files.answers.name == "answers (2).yml"
    assert len(files.warnings) == 2 and "name it dp_basics.py next time" in files.warnings[0]


def test_case_and_copy_renames(tmp_path):
    assert locate(make(tmp_path, "Copy of DP_Basics.py"), "dp_basics").module is not None


def test_missing_module_names_what_was_found(tmp_path):
    files = locate(make(tmp_path, "homework.py"), "dp_basics")
    assert files.module is None
    assert files.module_problem == ("no dp_basics.py found in your submission (found: "
                                    "homework.py); name your file dp_basics.py")
    assert files.answers is None


def test_single_nested_folder_is_entered(tmp_path):
    files = locate(make(tmp_path, "hw3/dp_basics.py", "hw3/answers.yml"), "dp_basics")
    assert files.module == tmp_path / "hw3" / "dp_basics.py"
    assert files.warnings == ["your files were found inside the folder 'hw3'"]


def test_symlinked_module_is_refused(tmp_path):
    (tmp_path / "sub").mkdir()
    os.symlink("/etc/hostname", tmp_path / "sub" / "dp_basics.py")
    files = locate(tmp_path / "sub", "dp_basics")
    assert files.module is None and "symbolic link" in files.module_problem
