"""The compiled row image decoder (connectors/mysql/_rowimage.c); everything else is in
pyproject.toml. The extension is optional: without a C compiler dblog installs and decodes
MySQL/MariaDB row images with its generated Python decoders (connectors/mysql/rowcodec.py)."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("dblog.connectors.mysql._rowimage",
                             ["connectors/mysql/_rowimage.c"],
                             depends=["connectors/mysql/_rowformat.h"], optional=True)])
