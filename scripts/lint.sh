#!/usr/bin/env bash
# Checks formatting with the toolchain's swift-format against .swift-format (SwiftNIO's settings).
# Exits non-zero on any finding. To fix findings in place: swift format format --in-place --recursive Sources Tests Package.swift
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
exec swift format lint --strict --recursive Sources Tests Package.swift
