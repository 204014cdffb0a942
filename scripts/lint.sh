#!/usr/bin/env bash
# Checks formatting with the toolchain's swift-format against .swift-format (SwiftNIO's settings), then that no
# Swift file reaches outside the repository or sets a TCP option at the socket level.
# Exits non-zero on any finding. To fix formatting in place: swift format format --in-place --recursive Sources Tests Package.swift
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

failed=0
swift format lint --strict --recursive Sources Tests Package.swift || failed=1

swift_files=()
while IFS= read -r -d '' file; do swift_files+=("$file"); done < <(
    find Sources Tests Benchmarks -name '*.swift' -print0 2>/dev/null
)
swift_files+=(Package.swift)

# Prints each match as file:line: text with the reason, and remembers that the check failed.
check() {
    local reason=$1 pattern=$2 matches
    if matches=$(grep -nE -- "$pattern" "${swift_files[@]}"); then
        printf '%s\n' "$matches" | sed "s|\$|   <- $reason|" >&2
        failed=1
    fi
}

# Tests and sources read nothing outside the repository: its fixtures are in Tests/Fixtures, its samples in config.
check 'a path literal that climbs out of its directory' '"\.\.(/|")'
check 'the fixtures beside the repository, not in it' 'shared/fixtures'
check 'a directory above the repository root' 'repositoryRoot[[:space:]]*\.deletingLastPathComponent\(\)'
check 'a machine-specific absolute path (use the repository or the temporary directory)' \
    '"/(work|root|home|Users|tmp|var/tmp|private/tmp)/'
# repositoryRoot on one line and .deletingLastPathComponent() on the next climbs out just the same.
if matches=$(awk 'FNR == 1 { prev = "" }
        prev ~ /repositoryRoot[[:space:]]*$/ && $0 ~ /^[[:space:]]*\.deletingLastPathComponent\(\)/ {
            print FILENAME ":" FNR ":" $0 }
        { prev = $0 }' "${swift_files[@]}") && [ -n "$matches" ]; then
    printf '%s   <- a directory above the repository root\n' "$matches" >&2
    failed=1
fi

# TCP options belong to the TCP level: at the socket level TCP_NODELAY's number is SO_DEBUG.
check 'a TCP option set at the socket level (use .tcpOption(...))' 'socketOption\(\.tcp_'

if [ "$failed" -ne 0 ]; then
    echo "lint: failed; see the findings above" >&2
    exit 1
fi
