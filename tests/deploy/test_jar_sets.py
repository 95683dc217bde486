"""The Maven projects that pin each jar set (``deploy/local/maven/*/pom.xml``) are well-formed XML.

A developer machine with the jars already fetched never reads a pom again, so a broken one (a ``--`` inside an
XML comment did it once) only fails on a fresh machine, in ``setup-tests.sh``, before any test runs.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

MAVEN = Path(__file__).resolve().parents[2] / "deploy" / "local" / "maven"
POM = "{http://maven.apache.org/POM/4.0.0}"


@pytest.mark.parametrize("pom", sorted(MAVEN.glob("*/pom.xml")), ids=lambda p: p.parent.name)
def test_pom_parses_and_names_its_artifact(pom: Path) -> None:
    root = ET.parse(pom).getroot()  # noqa: S314 - our own files
    assert root.tag == f"{POM}project"
    assert root.findtext(f"{POM}artifactId"), pom
    assert root.find(f"{POM}dependencies") is not None, pom


def test_every_jar_set_has_a_pom() -> None:
    assert len(list(MAVEN.glob("*/pom.xml"))) >= 5
