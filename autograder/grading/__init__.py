"""One submission's grading on the trusted parent's side: what was handed in, the runner it
starts (by name: autograder.runner), the results, the reports. Never imports torch or pytest."""
