"""tfplace: fast device placement for TensorFlow graphs too large for one device."""

import re
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).parent
VERSION = re.search(r'__version__ = "([^"]+)"', (HERE / "tfplace" / "_version.py").read_text()).group(1)

CORE = ["networkx>=3.2", "numpy>=1.26", "scipy>=1.11", "pymetis>=2023.1", "absl-py>=2.0", "matplotlib>=3.8"]
TF_CPU = ["tensorflow-cpu==2.21.0", "tf-keras==2.21.0"]
TF_GPU = ["tensorflow[and-cuda]==2.21.0", "tf-keras==2.21.0"]
DEV = ["pytest>=8", "pytest-xdist>=3.5", "hypothesis>=6.100", "ruff>=0.6", "mypy>=1.10"]

setup(
    name="tfplace",
    version=VERSION,
    description="Fast device placement (Celeritas and baselines) for TensorFlow graphs",
    long_description=(HERE / "README.md").read_text(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["tfplace", "tfplace.*"]),
    package_data={"tfplace": ["py.typed"]},
    install_requires=CORE,
    extras_require={"cpu": TF_CPU, "gpu": TF_GPU, "dev": DEV + TF_CPU},
    entry_points={"console_scripts": ["tfplace=tfplace.cli:run"]},
)
