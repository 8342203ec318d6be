from glob import glob

from setuptools import find_packages, setup

package_name = "sim_bridges"

setup(
    name=package_name,
    version="0.1.0",
    packages=find_packages(exclude=["test"]),
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{package_name}"]),
        (f"share/{package_name}", ["package.xml"]),
        (f"share/{package_name}/config", glob("config/*.yaml")),
        (f"share/{package_name}/models", glob("models/*.safetensors")),
    ],
    install_requires=["setuptools"],
    zip_safe=True,
    maintainer="BRACE-ROS maintainers",
    maintainer_email="brace-ros@example.org",
    description="Simulator bridges: embedded warehouse, AirSim, Isaac Sim, TextWorld",
    license="Apache-2.0",
    entry_points={"console_scripts": [
        "embedded_sim = sim_bridges.warehouse.embedded_sim_node:main",
        "airsim_bridge = sim_bridges.airsim.airsim_bridge_node:main",
        "isaac_bridge = sim_bridges.isaac.isaac_bridge_node:main",
        "textworld_world = sim_bridges.textworld.textworld_world_node:main",
        "brace-airsim-peer = sim_bridges.airsim.airsim_peer:main",
    ]},
)
