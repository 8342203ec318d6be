from setuptools import find_packages, setup

package_name = "brace_common"

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
    description="Shared plumbing of the BRACE-ROS packages",
    license="Apache-2.0",
)
