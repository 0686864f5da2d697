"""rt_runtime: a deterministic real-time runtime for robot perception, fusion and planning graphs.

ament_python conventions, so `colcon build` works in a ROS 2 workspace and `pip install -e .`
works in a plain virtual environment.
"""
from glob import glob

from setuptools import find_packages, setup

PACKAGE = "rt_runtime"

setup(
    name=PACKAGE,
    version="0.1.0",
    description="Deterministic real-time runtime for perception, fusion and planning graphs",
    license="Apache-2.0",
    python_requires=">=3.11",
    packages=find_packages(include=["rt_runtime", "rt_runtime.*", "pipelines", "pipelines.*"]),
    package_data={"pipelines": ["models/*.pt", "models/README.md"]},
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        (f"share/{PACKAGE}/launch", glob("launch/*.py")),
        (f"share/{PACKAGE}/config", glob("config/*.yaml")),
        # `ros2 run rt_runtime runtime_node | player` looks in lib/<package>; the console script
        # `rt-runtime` stays in bin/ for plain virtual environments.
        (f"lib/{PACKAGE}", ["rt_runtime/ros/bin/runtime_node", "rt_runtime/ros/bin/player"]),
    ],
    # Ranges here; requirements.txt pins the exact stack CI tests.
    # simplejpeg: the compressed camera codec's JPEG decoder (bench/bench_jpeg.py), pinned as CI tests it
    install_requires=["numpy>=1.26", "pyyaml>=6", "ruamel.yaml>=0.18", "torch>=2.13", "pydantic>=2.7",
                      "simplejpeg==1.9.0"],
    extras_require={
        "bag": ["rosbags>=0.11"],
        "live": ["foxglove-sdk==0.30.3"],
        "ros": [
            "ros-rclpy==9.1.2",
            "ros-rmw-fastrtps-cpp==9.3.3",
            "ros-sensor-msgs==5.5.1",
            "ros-nav-msgs==5.5.1",
            "ros-visualization-msgs==5.5.1",
            "ros-diagnostic-msgs==5.5.1",
            "ros-std-srvs==5.5.1",   # the player's ~/pause, ~/resume ... services (Trigger, SetBool)
        ],
        # owned CUDA priority streams (rt_runtime/device/cuda.py); cupy imports without a GPU
        "cuda": ["cupy-cuda13x>=14"],
        # `rt-runtime batch`: Dask distributed, the Parquet results store, the progress bar
        "fleet": ["dask>=2026.8.0", "distributed>=2026.8.0", "pyarrow>=26", "tqdm>=4.66"],
        "dev": ["pytest>=8", "pytest-timeout>=2.3", "hypothesis>=6.100", "scipy>=1.11", "matplotlib>=3.8", "websockets==17.4",
                # the live view's MCAP read back, its Foxglove (protobuf) messages decoded (tests/foxglove_client.py)
                "mcap==1.6.0", "protobuf==7.36.2"],
    },
    zip_safe=True,
    entry_points={"console_scripts": ["rt-runtime = rt_runtime.cli:main"]},
)
