"""Which packages the wheel holds; everything else is in pyproject.toml.

Here rather than there because pyproject's package discovery cannot add a package that lives
outside its directory: `service.sql` is the repository's top-level sql/ (package-dir in
pyproject.toml). Its folders are listed as packages so that their files ship as package data.
"""

from setuptools import find_namespace_packages, setup

setup(
    packages=[
        *find_namespace_packages(include=["service", "service.*"], exclude=["*.__pycache__"]),
        "service.sql",
        *(f"service.sql.{p}" for p in find_namespace_packages(where="sql", exclude=["*__pycache__"])),
    ],
)
