from setuptools import find_packages, setup

package_name = "brace_safety"

setup(
    name=package_name,
    version="0.1.0",
    packages=find_packages(exclude=["test"]),
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{package_name}"]),
        (f"share/{package_name}", ["package.xml"]),
    ],
    install_requires=["setuptools"],
    zip_safe=True,
    maintainer="BRACE-ROS maintainers",
    maintainer_email="brace-ros@example.org",
    description="The collision monitor between plans and motors: zones acting on commanded motion; ROS-free core, "
                "thin lifecycle nodes",
    license="Apache-2.0",
    entry_points={
        "console_scripts": [
            "cmd_vel_monitor = brace_safety.cmd_vel_monitor_node:main",
            "airsim_monitor = brace_safety.airsim_monitor_node:main",
            "hostile_planner = brace_safety.hostile_planner_node:main",
            "ee_monitor = brace_safety.ee_monitor_node:main",
        ],
    },
)
