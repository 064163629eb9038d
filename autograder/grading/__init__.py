"""One submission's grading on the trusted parent's side: the runner it starts (by name:
autograder.runner), the results, the reports; what was handed in is read by autograder.inputs.
Never imports torch or pytest."""
