from setuptools import find_packages, setup

package_name = "brace_memory"

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
    description="Memory modules on the replanning call's retrieve phase (ReCAP context tree, OmniAct episodic and "
                "reflective memory, RAG) and their persistent store; ROS-free",
    license="Apache-2.0",
    entry_points={
        "console_scripts": [
            "brace-memory = brace_memory.store_cli:main",
        ],
    },
)
