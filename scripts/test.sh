#!/usr/bin/env bash
# Runs every Rivet test on a Debian 12 machine (as root): installs what is
# missing from Debian, then gofmt and go mod tidy checks, go vet, the
# linters (scripts/lint.sh), the host tests with -race, the fuzz targets,
# the lab's own tests, and the soft-RoCE suite inside a throwaway VM
# (cmd/rxevm). This is what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages the VM suite needs: qemu and a kernel to boot, busybox and
# kmod to build the initramfs, xz to unpack the kernel for fast boots,
# iproute2/rdma-core for the guest's tools, the C reference stack
# (libibverbs providers, ibverbs-utils, perftest) to compare against, and
# MPICH for its Hydra launcher, which the PMI bootstrap is tested under, and
# Open MPI, whose build of the OSU loops (bench/osu/testdata) bench/osu's output is
# checked against; gcc and libc6-dev build the lab's QEMU plugin (lab/qemu);
# Slurm 22.05 and munge run a real Slurm for examples/slurm (internal/slurmtest).
packages=(qemu-system-x86 linux-image-amd64 busybox-static cpio kmod xz-utils iproute2
	rdma-core ibverbs-providers ibverbs-utils perftest mpich openmpi-bin libopenmpi-dev gcc libc6-dev
	munge slurmctld slurmd slurm-client)
missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' || missing+=("$p")
done
if ((${#missing[@]})); then
	echo "== installing: ${missing[*]}"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! command -v go >/dev/null && [ -x /usr/local/go/bin/go ]; then
	export PATH=/usr/local/go/bin:$PATH
fi
command -v go >/dev/null || { echo "test.sh: Go 1.26 or newer is needed (go.mod says which)" >&2; exit 1; }

t0=$SECONDS
echo "== gofmt, go mod tidy, go vet, linters"
unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
	echo "test.sh: not gofmt-formatted:" $unformatted >&2
	exit 1
fi
for mod in . lab; do
	(cd $mod && go mod tidy -diff) || { echo "test.sh: $mod/go.mod or go.sum is not tidy (run go mod tidy there)" >&2; exit 1; }
done
go vet ./...
(cd lab && go vet ./...)
# The critical-path probe build (internal/critpath) must keep compiling.
go vet -tags rivetprobe ./internal/... ./fabric ./bench/...
# Rivet drives Linux's uverbs: its packages build on Linux only, and say
# so with build constraints, so that elsewhere the module still vets
# (to the portable packages: op, internal/reduce, …) instead of failing
# on missing system calls.
GOOS=darwin go vet ./...
go test -count=1 -tags rivetprobe ./internal/critpath
bash scripts/lint.sh

# The oldest Go go.mod declares, which every program importing Rivet may
# use: its toolchain comes from the Go module proxy (GOTOOLCHAIN), and
# builds, vets and runs a few jobs.
oldest=go$(go mod edit -json | sed -n 's/^[[:space:]]*"Go": "\(.*\)",*$/\1/p')
echo "== $oldest (go.mod's oldest)"
GOTOOLCHAIN=$oldest go vet ./...
GOTOOLCHAIN=$oldest go test -count=1 ./op ./examples/allreduce ./examples/ftskeleton

echo "== host tests (-race)"
# Includes cmd/rxevm's own tests, which boot VMs, and the PMI tests under
# Hydra; tests that need soft-RoCE skip here with a reason and run in the VM
# suite below. The REQUIRE variables turn a missing tool into a failure.
# The tests that boot clusters take turns (testutil.RequireCluster), so a
# package may wait for another's: 20 minutes, not go test's 10.
RIVET_REQUIRE_VM=1 RIVET_REQUIRE_TOOLS=1 go test -race -count=1 -timeout 20m ./...
# TestHostNode256 runs 256 processes, too many for the race detector's
# memory (it skips under -race): here, on its own.
echo "== a node of 256 processes"
go test -count=1 -run '^TestHostNode256$' -v ./cmd/rivet 2>&1 | grep -E '^(---|\s+---|ok|FAIL|PASS)|node_test'
t1=$SECONDS

echo "== fuzzing the wire decoders, ${RIVET_FUZZTIME:-300000x} each"
# Their seed corpora (and any crasher found before, in testdata/fuzz) run
# with the tests above; here each target also explores, for a bounded
# number of inputs (3 to 10 s each here). A count, not a duration: with a
# duration Go 1.26's fuzz coordinator may report its own deadline as a
# failure, with no crasher (golang/go#75804, fixed in Go 1.27) — it did
# once in CI, for FuzzStoreServer.
for target in "FuzzV1 ./internal/pmi" "FuzzV2 ./internal/pmi" "FuzzParseMapping ./internal/pmi" "FuzzParseHostlist ./fabric/bootstrap" \
	"FuzzRemoteMem ./fabric" "FuzzNotice ./fabric" "FuzzParseGID ./hw" \
	"FuzzGetVerbs ./fabric/internal/wire" "FuzzReadHello ./fabric/internal/wire" \
	"FuzzStoreServer ./fabric/bootstrap" "FuzzStoreClient ./fabric/bootstrap" "FuzzJobData ./internal/pmix"; do
	set -- $target
	go test -run '^$' -fuzz "^$1\$" -fuzztime "${RIVET_FUZZTIME:-300000x}" "$2" >/tmp/rivet-fuzz.log 2>&1 ||
		{ cat /tmp/rivet-fuzz.log; echo "test.sh: $1 failed (the crasher is in $2/testdata/fuzz/$1)" >&2; exit 1; }
done
tf=$SECONDS

echo "== lab tooling (its own module: lab/)"
# Measurement tools users do not need; tested so that they keep working.
(cd lab && RIVET_REQUIRE_VM=1 RIVET_REQUIRE_TOOLS=1 go test -count=1 ./...)
tl=$SECONDS

echo "== soft-RoCE suite in the VM"
mkdir -p bin
CGO_ENABLED=0 go build -o bin/rxevm ./cmd/rxevm
# The soft-RoCE packages are those whose tests ask for rxe devices
# (testutil.RXEDevices). Each package's test binary boots its own VM (-p 1:
# one VM at a time on 2 cores). Tests named TestHost* run only above: they
# are about machines without RDMA, or boot VMs of their own (clusters).
# Any other skip inside the VM fails the run.
#
# Timeouts, innermost first: a test binary panics with a goroutine dump
# after 12m; rxevm kills a VM still running after 12m40s, printing the
# kernel console's last lines (and boots again, once, a guest that has not
# started the command within 3m); go test kills rxevm at 13m, its
# -timeout plus a minute.
vm_pkgs=$(go list $(grep -rl --include='*_test.go' --exclude-dir=lab -e 'testutil\.RXEDevices' -e 'testutil\.ProviderEnv' . | xargs -n1 dirname | sort -u))
topology=${RIVET_TOPOLOGY:-rxe2}
RIVET_REQUIRE_RDMA=1 go test -count=1 -p 1 -v -timeout 12m -skip '^TestHost' \
	-exec "$PWD/bin/rxevm -v -topology $topology -timeout 12m40s" $vm_pkgs 2>&1 |
	grep -vE '^=== (RUN|PAUSE|CONT)' |
	awk '{print} /^--- SKIP/ {skip=1} END {if (skip) {print "test.sh: a soft-RoCE test skipped inside the VM"; exit 1}}'
t2=$SECONDS
echo "== done: host tests $((t1 - t0))s, fuzzing $((tf - t1))s, lab $((tl - tf))s, VM suite $((t2 - tl))s"
