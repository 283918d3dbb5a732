# The two commands of the README:
#   make report   set up everything, run the default sweep, write the HTML report
#   make test     set up everything, run the tests (what CI runs)
# Both install what they need, idempotently: Debian packages (only the missing
# ones), the Python package with its C parts.

PYTHON  ?= python3
RESULTS ?= results/default
APT_PACKAGES := clang llvm libbpf-dev bpftool libelf-dev zlib1g-dev pkg-config make gcc \
                linux-perf e2fsprogs xfsprogs btrfs-progs util-linux mount kmod
PIP := $(PYTHON) -m pip install --quiet --disable-pip-version-check --root-user-action=ignore

.PHONY: all deps install build report test bench clean

all: install

deps:
	@missing=$$(for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:" $$missing; \
	  { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing || \
	    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; }; }; \
	fi

build: deps
	$(MAKE) -C probes
	$(MAKE) -C workloads

install: build
	$(PIP) .

report: install
	lockscope sweep --out $(RESULTS)
	lockscope report $(RESULTS)

test: install
	@$(PYTHON) -c "import pytest" 2>/dev/null || $(PIP) "pytest>=7"
	$(PYTHON) -m pytest tests

bench: install
	$(PYTHON) bench/overhead.py

clean:
	$(MAKE) -C probes clean
	$(MAKE) -C workloads clean
	rm -rf build *.egg-info
