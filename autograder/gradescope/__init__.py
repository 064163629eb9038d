"""gradescope"""
