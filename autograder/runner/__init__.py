"""The runner process: runs an assignment's hidden pytest suite against one submission's
sandbox (`suite`, `pytest_plugin`), or forks such runners from a warm server (`warm`). The only
trusted code that imports pytest or torch (an import contract in `make lint` holds it to that)."""
