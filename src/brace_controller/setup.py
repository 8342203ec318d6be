from glob import glob

from setuptools import find_packages, setup

package_name = "brace_controller"

setup(
    name=package_name,
    version="0.1.0",
    packages=find_packages(exclude=["test"]),
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{package_name}"]),
        (f"share/{package_name}", ["package.xml"]),
        (f"share/{package_name}/config", glob("config/*.yaml")),
    ],
    install_requires=["setuptools"],
    zip_safe=True,
    maintainer="BRACE-ROS maintainers",
    maintainer_email="brace-ros@example.org",
    description="BRACE controller and trigger monitor",
    license="Apache-2.0",
    entry_points={
        "console_scripts": [
            "brace_controller = brace_controller.controller_node:main",
            "trigger_monitor = brace_controller.trigger_monitor_node:main",
        ],
    },
)
