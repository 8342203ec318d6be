from setuptools import find_packages, setup

package_name = "brace_audit"

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
    description="The audit of BRACE-ROS: the recorder's MCAP bag, the report and the paper's tables from the bags "
                "alone, and the viewer (live and from bags)",
    license="Apache-2.0",
    entry_points={
        "console_scripts": [
            "audit_recorder = brace_audit.audit_recorder_node:main",
            "brace-audit = brace_audit.audit:main",
            "brace_viewer = brace_audit.viewer_node:main",
        ],
    },
)
