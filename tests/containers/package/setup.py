from setuptools import setup

setup(name="trainerpkg", version="0.1", packages=["trainerpkg"])
