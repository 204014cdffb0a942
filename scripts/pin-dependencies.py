#!/usr/bin/env python3
"""Pins the Docker image's dependencies to the versions the tests ran with.

Package.swift asks for version ranges (`from:`), so a build elsewhere resolves them afresh and may get newer
releases than the tested ones. Package.resolved records what the tests resolved, but not in a form the image can
use: it pins commit ids, and a package mirror has commit ids of its own, so Package.resolved is kept out of the
repository and of the image; versions mean the same everywhere. This script writes the resolved *versions* (every package of the
graph, the ones Package.swift names and the ones they bring) to Docker/Package.pins, as exact requirements that the
Dockerfile's build stage appends to Package.swift:

    package.dependencies = [.package(url: "...", exact: "2.101.3"), ...]

    scripts/pin-dependencies.py           # after a build or test run: write Docker/Package.pins
    scripts/pin-dependencies.py --check   # CI: fail when Docker/Package.pins is not what was resolved

It reads Package.resolved only: no network, no build.
"""
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESOLVED = os.path.join(ROOT, "Package.resolved")
MANIFEST = os.path.join(ROOT, "Package.swift")
PINS = os.path.join(ROOT, "Docker", "Package.pins")

HEADER = """\
// The versions the tests ran with, exactly: Docker/Dockerfile appends this to Package.swift in its build stage, so
// the image is built from them and not from whatever the ranges in Package.swift resolve to on the day.
// Made by scripts/pin-dependencies.py from the tested build's Package.resolved; CI checks that they agree.
// Do not edit: to move a version forward, see "Dependency versions" in README.md.
"""


def resolved_versions():
    """(location, version) of every package Package.resolved pins, sorted by identity; exits on a pin by branch or
    commit, which an exact version cannot express."""
    try:
        with open(RESOLVED) as f:
            resolved = json.load(f)
    except FileNotFoundError:
        sys.exit(f"pin-dependencies: no {os.path.relpath(RESOLVED, ROOT)}: build or test first (swift build)")
    pins = resolved.get("pins") or resolved.get("object", {}).get("pins", [])
    versions = []
    for pin in sorted(pins, key=lambda pin: pin.get("identity", pin.get("package", "")).lower()):
        location = pin.get("location") or pin.get("repositoryURL")
        version = (pin.get("state") or {}).get("version")
        if not location or not version:
            sys.exit(f"pin-dependencies: {pin.get('identity', pin)} is not resolved to a version: {pin.get('state')}")
        versions.append((location, version))
    if not versions:
        sys.exit("pin-dependencies: Package.resolved pins nothing")
    return versions


def declared_traits():
    """The traits Package.swift asks of a package (`traits: [...]` on its `.package` line), by location: an exact
    pin without them would take the package's default traits (swift-otel's bring gRPC)."""
    with open(MANIFEST) as f:
        manifest = f.read()
    traits = {}
    for match in re.finditer(r'\.package\(url:\s*"([^"]+)"[^)]*?traits:\s*(\[[^\]]*\])\)', manifest):
        traits[match.group(1).lower().removesuffix(".git")] = match.group(2)
    return traits


def pins_text(versions):
    traits = declared_traits()

    def pin(location, version):
        named = traits.get(location.lower().removesuffix(".git"))
        return f'    .package(url: "{location}", exact: "{version}"' + (f", traits: {named}" if named else "") + "),"

    lines = [pin(location, version) for location, version in versions]
    return HEADER + "package.dependencies = [\n" + "\n".join(lines) + "\n]\n"


def main():
    check = sys.argv[1:] == ["--check"]
    if sys.argv[1:] not in ([], ["--check"]):
        sys.exit(__doc__)
    expected = pins_text(resolved_versions())
    if not check:
        with open(PINS, "w") as f:
            f.write(expected)
        print(f"pin-dependencies: wrote {os.path.relpath(PINS, ROOT)}")
        return
    try:
        with open(PINS) as f:
            current = f.read()
    except FileNotFoundError:
        current = ""
    if current != expected:
        wanted = set(expected.splitlines()) - set(current.splitlines())
        stale = set(current.splitlines()) - set(expected.splitlines())
        for line in sorted(stale):
            print(f"  pinned, not resolved: {line.strip()}", file=sys.stderr)
        for line in sorted(wanted):
            print(f"  resolved, not pinned: {line.strip()}", file=sys.stderr)
        sys.exit("pin-dependencies: Docker/Package.pins does not match the versions the tests resolved; "
                 "run scripts/pin-dependencies.py and commit Docker/Package.pins")
    print(f"pin-dependencies: {os.path.relpath(PINS, ROOT)} matches Package.resolved")


if __name__ == "__main__":
    main()
