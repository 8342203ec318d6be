from glob import glob

from setuptools import find_packages, setup

package_name = "erecap_planner"

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
    description="E-RECAP pruning planner",
    license="Apache-2.0",
    entry_points={"console_scripts": [
        "erecap_planner = erecap_planner.planner_node:main",
        "brace-planner-server = erecap_planner.local_server:main",
    ]},
)
