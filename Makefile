# The two commands of the README:
#   make report   set up everything, run the default sweep, write the HTML report
#   make test     set up everything, run the tests (what CI runs)
# Both install what they need, idempotently: Debian packages (only the missing
# ones), the Python package with its C parts.

PYTHON  ?= python3
RESULTS ?= results/default
# libc6-dbg: the C library's full symbol table (user stacks through glibc)
# binutils: c++filt, the demangler of C++ and Rust names in user stacks
# rocksdb-tools, dbench, exim4-daemon-light: the application workloads (lockscope/measure/apps.toml); Exim's
#   package also starts the machine's own MTA (Debian's default: loopback only, local delivery); lockscope's
#   exim workload runs a private server per point and never touches that one
# texlive-latex-recommended: pdflatex and booktabs, to compile-test the exported bottlenecks.tex
# g++, rustc: the C++ and Rust test programs of tests/test_langs.py (a rustc already on PATH, e.g. rustup's, is used first)
# mariadb-server, sysbench, postgresql: tests/test_server_waits.py, tests/test_pgbench.py (a private server
#   per test, never the machine's)
# stress-ng: the CPU hog the decision tests and bench/stability.py run beside lockscope
# libsqlite3-dev: tests/programs/sqlbusy.c, SQLite writers with a busy handler of their own (tests/test_filelocks.py)
# Packages that start a service on install (exim4, mariadb-server, postgresql) are installed with service starts
# refused (a policy-rc.d that exits 101, the Debian way, removed afterwards): the tests make private servers.
APT_PACKAGES := clang llvm libbpf-dev bpftool libelf-dev zlib1g-dev pkg-config make gcc \
                linux-perf e2fsprogs xfsprogs btrfs-progs util-linux mount libc6-dbg kmod binutils \
                chromium rocksdb-tools dbench texlive-latex-recommended g++ rustc exim4-daemon-light \
                mariadb-server sysbench postgresql stress-ng libsqlite3-dev
PIP := $(PYTHON) -m pip install --quiet --disable-pip-version-check --root-user-action=ignore

.PHONY: all deps tools install build report test bench clean

all: install

deps: tools
	@missing=$$(for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:" $$missing; \
	  policy=/usr/sbin/policy-rc.d; made=; \
	  if [ ! -e $$policy ]; then printf '#!/bin/sh\n# lockscope make deps: no service starts while installing\nexit 101\n' > $$policy; \
	    chmod 755 $$policy; made=1; fi; \
	  { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing || \
	    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; }; }; \
	  rc=$$?; if [ -n "$$made" ]; then rm -f $$policy; fi; [ $$rc -eq 0 ] || exit $$rc; \
	fi
	@# pyelftools: ELF symbols of user-space locks and stacks (also in setup.py, for running from the source tree)
	@$(PYTHON) -c "import elftools" 2>/dev/null || $(PIP) "pyelftools>=0.29"

# inferno renders the flame graphs (cargo install puts it in ~/.cargo/bin,
# where lockscope finds it even off PATH). Without cargo the report still
# renders and says why it has no flame graphs.
CARGO ?= $(shell command -v cargo 2>/dev/null || echo $(HOME)/.cargo/bin/cargo)
tools:
	@if command -v inferno-flamegraph >/dev/null 2>&1 || [ -x "$${CARGO_HOME:-$(HOME)/.cargo}/bin/inferno-flamegraph" ]; then :; \
	elif [ -x "$(CARGO)" ]; then echo "installing inferno (flame graphs)"; "$(CARGO)" install --quiet --locked inferno; \
	else echo "warning: cargo not found: flame graphs need inferno (https://rustup.rs, then cargo install inferno)"; fi

build: deps
	$(MAKE) -C probes
	$(MAKE) -C workloads

# editable: the lockscope command, the tests and a reader of the tree all see
# this checkout (setup.py's package_dir maps analyzer/, reports/, templates/
# into the package; `pip install .` builds a copy for elsewhere)
# then the bytecode written once (an editable install compiles nothing, and
# with PYTHONDONTWRITEBYTECODE every lockscope command compiled its modules
# again: 0.2 s of each run's start)
install: build
	$(PIP) -e .
	$(PYTHON) -m compileall -q lockscope analyzer reports >/dev/null

report: install tools
	lockscope sweep --out $(RESULTS)
	lockscope report $(RESULTS)

# Two passes: the tests that measure nothing (recorded runs, the analysis,
# reports, the workloads' semantics) one per CPU (pytest-xdist), then the
# end-to-end ones (marked e2e: they load probes and measure, so one at a time,
# the machine otherwise quiet). Both run, and either failing fails the target.
# --durations: the slowest tests listed (the suite's goal: 15 min on 2 CPUs)
test: install tools
	@$(PYTHON) -c "import pytest" 2>/dev/null || $(PIP) "pytest>=7"
	@$(PYTHON) -c "import xdist" 2>/dev/null || $(PIP) "pytest-xdist>=3"
	@$(PYTHON) -m pytest tests -m "not e2e" -n auto --durations=10; unit=$$?; \
	$(PYTHON) -m pytest tests -m e2e --durations=25; e2e=$$?; \
	[ $$unit -eq 0 ] && [ $$e2e -eq 0 ]

bench: install
	$(PYTHON) bench/overhead.py

clean:
	$(MAKE) -C probes clean
	$(MAKE) -C workloads clean
	rm -rf build *.egg-info
