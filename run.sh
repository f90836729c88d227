#!/usr/bin/env bash
# The project's two entry points on a fresh Debian machine:
#   ./run.sh main   run the main job (see README.md)
#   ./run.sh test   run every test (what CI runs)
# Both first install what is missing: Debian packages, the kernel the QEMU
# guest boots, and the project's venv (.venv) with its Python packages.
set -euo pipefail
cd "$(dirname "$0")"

step() { printf '\n== %s\n' "$*"; }

install_debian_packages() {
	local sudo=""
	[ "$(id -u)" -eq 0 ] || sudo=sudo
	if ! command -v python3 >/dev/null; then
		step "installing python3"
		$sudo apt-get update -q
		DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q python3
	fi
	# The one package list (qemu_tests/preflight.py, standard library only):
	# the newest 6.12 generic kernel apt offers with its headers, QEMU, a
	# static busybox, gcc, the kernel source for checkpatch, python3-dev
	# where Python.h is missing. The harness's preflight checks the same list.
	local list
	if ! list=$(python3 -m qemu_tests.preflight --apt-packages 2>/dev/null); then
		# No apt lists yet (a fresh container): fetch them and ask again.
		step "apt-get update"
		$sudo apt-get update -q
		list=$(python3 -m qemu_tests.preflight --apt-packages)
	fi
	local missing=()
	for p in $list; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	step "installing Debian packages: ${missing[*]}"
	$sudo apt-get update -q
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "${missing[@]}"
}

# pip's output cut to a line per step (each package it collects and downloads, the install, the result), so a
# minute of downloads is not a minute of silence; from the first error on, every line.
pip_progress() {
	awk '/^(ERROR|error)/ { err = 1 }
		err || /^(Collecting|Obtaining|  Downloading|Building|Installing collected|Successfully)/ { print "  pip: " $0; fflush() }'
}

install_venv() {
	if [ ! -x .venv/bin/python ]; then
		step "creating .venv"
		python3 -m venv .venv
	fi
	# Re-install when pyproject.toml changed since the last install.
	if [ ! -f .venv/.installed ] || [ pyproject.toml -nt .venv/.installed ]; then
		step "installing Python packages into .venv"
		.venv/bin/pip install -U pip 2>&1 | pip_progress
		.venv/bin/pip install -e '.[dev]' 2>&1 | pip_progress
		touch .venv/.installed
	fi
}

install_debian_packages
install_venv
export PATH="$PWD/.venv/bin:$PATH"

case "${1:-}" in
main)
	shift
	exec python -m qemu_tests.main_job "$@"
	;;
test)
	shift
	step "ruff check"
	ruff check .
	step "ruff format --check"
	ruff format --check .
	step "host tests (pytest)"
	# On every CPU (pytest-xdist); worksteal evens out the slow tests (tests/conftest.py runs the
	# ones that boot a guest first).
	python -m pytest -q -n auto --dist worksteal "$@"
	if [ -d qemu_tests ] && [ -f qemu_tests/__main__.py ]; then
		step "QEMU guest tests (python -m qemu_tests)"
		rc=0
		python -m qemu_tests || rc=$?
		# The current kernel too, Debian unstable's newest 7.2 (fetched and prepared into the cache
		# on the first run): the driver-facing suites, where the kernel differs; the whole suite on
		# 7.2 is the kernel matrix's (docs/qemu_tests.md, "The current kernel").
		step "QEMU guest tests on the current kernel (python -m qemu_tests --kernel 7.2 --suites tests/kernel tests/conformance)"
		python -m qemu_tests --kernel 7.2 --suites tests/kernel tests/conformance || rc=$?
		exit "$rc"
	fi
	;;
*)
	echo "usage: ./run.sh main|test" >&2
	exit 2
	;;
esac
