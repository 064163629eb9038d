"""What a student submitted, read before anything runs: the submission folder and the files to
grade in it (`submission`), zip uploads extracted safely (`archives`), a notebook turned back
into the module (`notebook`). The uploader's bytes are parsed only in limited children
(autograder.sandbox.untrusted_parse). Imports neither torch nor pytest, and never the grading
that reads it (autograder.grading) nor anything above."""
