from setuptools import find_packages, setup

package_name = "brace_training"

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
    description="Offline training tools of the BRACE-ROS planner",
    license="Apache-2.0",
    entry_points={"console_scripts": [
        "erecap-train = brace_training.erecap_train_cli:main",
        "warehouse-finetune = brace_training.finetune_cli:main",
        "warehouse-predictor = brace_training.predictor_cli:main",
        "train-saved = brace_training.train_saved_cli:main",
        "twin-finetune = brace_training.twin_finetune_cli:main",
        "state_encoder_cli = brace_training.state_encoder_cli:main",
    ]},
)
