#!/usr/bin/env bash
# The linters CI runs, at pinned versions fetched through the Go module
# proxy: staticcheck with every check (staticcheck.conf; it includes
# unused code), misspell on code and docs, and goimports with Rivet's own
# imports grouped last. The layer order of imports is a test
# (internal/layers).
set -euo pipefail
cd "$(dirname "$0")/.."

staticcheck=honnef.co/go/tools/cmd/staticcheck@v0.8.2
misspell=github.com/golangci/misspell/cmd/misspell@v0.8.0
goimports=golang.org/x/tools/cmd/goimports@v0.52.0

tools=$(mktemp -d)
trap 'rm -rf "$tools"' EXIT
for tool in "$staticcheck" "$misspell" "$goimports"; do GOBIN=$tools go install "$tool"; done

"$tools/staticcheck" ./...
(cd lab && "$tools/staticcheck" ./...)
# The packages that build elsewhere (op, internal/reduce, …) too.
GOOS=darwin "$tools/staticcheck" ./...
(cd lab && "$tools/staticcheck" ./...)
"$tools/misspell" -error $(git ls-files '*.go' '*.md' '*.sh')
unsorted=$("$tools/goimports" -l -local github.com/rivet-hpc/rivet .)
if [ -n "$unsorted" ]; then
	echo "lint.sh: imports not as goimports -local github.com/rivet-hpc/rivet puts them:" $unsorted >&2
	exit 1
fi
