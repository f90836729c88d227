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
	local kver=6.12.107+deb12-amd64
	local pkgs=(gcc make python3-venv kmod qemu-system-x86 busybox-static
		"linux-image-${kver}-unsigned" "linux-headers-${kver}" linux-source-6.12)
	# libteflon.so is built against Python's headers (cffi embedding).
	local include
	include=$(python3 -c 'import sysconfig; print(sysconfig.get_path("include"))')
	[ -f "$include/Python.h" ] || pkgs+=(python3-dev)
	local missing=()
	for p in "${pkgs[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	step "installing Debian packages: ${missing[*]}"
	local sudo=""
	[ "$(id -u)" -eq 0 ] || sudo=sudo
	$sudo apt-get update -q
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "${missing[@]}"
}

install_venv() {
	if [ ! -x .venv/bin/python ]; then
		step "creating .venv"
		python3 -m venv .venv
	fi
	# Re-install when pyproject.toml changed since the last install.
	if [ ! -f .venv/.installed ] || [ pyproject.toml -nt .venv/.installed ]; then
		step "installing Python packages into .venv"
		.venv/bin/pip install -q -U pip
		.venv/bin/pip install -q -e '.[dev]'
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
	python -m pytest -q "$@"
	if [ -d qemu_tests ] && [ -f qemu_tests/__main__.py ]; then
		step "QEMU guest tests (python -m qemu_tests)"
		python -m qemu_tests
	fi
	;;
*)
	echo "usage: ./run.sh main|test" >&2
	exit 2
	;;
esac
