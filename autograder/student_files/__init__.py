"""student_files"""
