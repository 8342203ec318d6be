from glob import glob

from setuptools import find_packages, setup

package_name = "robot_bridge"

setup(
    name=package_name,
    version="0.1.0",
    packages=find_packages(exclude=["test"]),
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{package_name}"]),
        (f"share/{package_name}", ["package.xml"]),
        (f"share/{package_name}/config", glob("config/*.yaml")),
        (f"share/{package_name}/media/pickfruit", glob("media/pickfruit/*.png")),
        (f"share/{package_name}/models", glob("models/*.safetensors")),
    ],
    install_requires=["setuptools"],
    zip_safe=True,
    maintainer="BRACE-ROS maintainers",
    maintainer_email="brace-ros@example.org",
    description="Robot bridges: the AgileX PiPER arm (piper_sdk) and its CAN twin, Orbbec cameras, OpenVLA executor",
    license="Apache-2.0",
    entry_points={"console_scripts": [
        "piper_arm = robot_bridge.piper.piper_arm_node:main",
        "piper_twin = robot_bridge.piper.piper_twin_node:main",
        "twin_world = robot_bridge.pickfruit.twin_world_node:main",
        "orbbec_camera = robot_bridge.orbbec.orbbec_camera_node:main",
        "openvla_executor = robot_bridge.openvla.openvla_executor_node:main",
        "visual_verifier = robot_bridge.verifier.visual_verifier_node:main",
        "operator_task = robot_bridge.pickfruit.operator_task_node:main",
        "robot_preflight = robot_bridge.preflight.robot_preflight:main",
    ]},
)
