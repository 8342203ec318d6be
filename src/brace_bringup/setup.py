from glob import glob

from setuptools import find_packages, setup

package_name = "brace_bringup"

setup(
    name=package_name,
    version="0.1.0",
    packages=find_packages(exclude=["test"]),
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{package_name}"]),
        (f"share/{package_name}", ["package.xml"]),
        # Nav2 bringup's layout: found through get_package_share_directory (symlinks with --symlink-install)
        (f"share/{package_name}/launch", glob("launch/*.launch.py")),
        (f"share/{package_name}/params", glob("params/*.yaml")),
        *((f"share/{package_name}/params/{world}", glob(f"params/{world}/*.yaml"))
          for world in ("robot", "airsim", "isaac", "textworld", "examples")),
        (f"share/{package_name}/runs", glob("runs/*.yaml")),
        (f"share/{package_name}/rviz", glob("rviz/*.rviz")),
        (f"share/{package_name}/foxglove", glob("foxglove/*.json")),
    ],
    install_requires=["setuptools"],
    zip_safe=True,
    maintainer="BRACE-ROS maintainers",
    maintainer_email="brace-ros@example.org",
    description="Stacks, run configurations and brace-run of BRACE-ROS",
    license="Apache-2.0",
    entry_points={"console_scripts": [
        "brace-run = brace_bringup.runner:main",
    ]},
)
