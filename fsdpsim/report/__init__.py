"""Presentation: tables, JSON/CSV, HTML and figures. Human units appear here and nowhere deeper."""
