"""pip install . : builds the C parts (BPF probes + loader, workload driver)
with make and installs them inside the package, next to the `lockscope`
command. analyzer/, reports/ and templates/ install as subpackages of
lockscope."""
import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
BINARIES = (("probes", "lockscope-probe"), ("probes", "lockscope-inject"), ("workloads", "lockscope-workload"))


def version():
    with open(os.path.join(HERE, "lockscope", "__init__.py")) as f:
        for line in f:
            if line.startswith("__version__"):
                return line.split("=")[1].strip().strip('"')
    raise RuntimeError("no __version__")


class BuildWithNative(build_py):
    def run(self):
        super().run()
        dst = os.path.join(self.build_lib, "lockscope", "bin")
        os.makedirs(dst, exist_ok=True)
        for directory, binary in BINARIES:
            subprocess.check_call(["make", "-C", os.path.join(HERE, directory)])
            shutil.copy2(os.path.join(HERE, directory, "build", binary), dst)


class NativeDistribution(Distribution):
    """The package carries native binaries: not a pure-Python wheel."""

    def has_ext_modules(self):
        return True


setup(
    name="lockscope",
    version=version(),
    description="Lock-contention profiler and scalability analyzer for Linux (eBPF)",
    license="MIT",
    python_requires=">=3.11",
    packages=["lockscope", "lockscope.model", "lockscope.measure", "lockscope.machine", "lockscope.top", "lockscope.analyzer", "lockscope.analyzer.kernel",
              "lockscope.analyzer.user", "lockscope.reports", "lockscope.templates"],
    package_dir={"lockscope": "lockscope", "lockscope.analyzer": "analyzer",
                 "lockscope.reports": "reports", "lockscope.templates": "templates"},
    package_data={"lockscope": ["proberows.toml"], "lockscope.measure": ["apps.toml", "appfiles/*"], "lockscope.analyzer": ["*.toml"],
                  "lockscope.analyzer.kernel": ["*.toml"], "lockscope.analyzer.user": ["*.toml"],
                  "lockscope.templates": ["*.j2"]},
    install_requires=["jinja2>=3.1", "matplotlib>=3.6", "scipy>=1.9", "pyelftools>=0.29"],
    extras_require={"test": ["pytest>=7"]},
    entry_points={"console_scripts": ["lockscope=lockscope.cli:main"]},
    cmdclass={"build_py": BuildWithNative},
    distclass=NativeDistribution,
    zip_safe=False,
)
