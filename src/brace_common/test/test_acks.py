"""wait_for_all_acked lets the process's other threads run while it waits (rclpy's own holds the interpreter lock).

A reader in another process is stopped (SIGSTOP), so it cannot acknowledge; a thread of this process resumes it
once it runs. With a wait that froze the process that thread could not run, no acknowledgement could come, and the
wait would end False at its timeout.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy
from std_msgs.msg import String

from brace_common.acks import unacknowledged, wait_for_all_acked
from brace_common.testing import wait_for

RELIABLE = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
READER = """
import rclpy
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy
from std_msgs.msg import String
rclpy.init()
node = rclpy.create_node("acks_reader")
node.create_subscription(String, "acks", lambda _m: None, QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE))
rclpy.spin(node)
"""


def test_the_wait_lets_other_threads_run_and_ends_once_acknowledged(ros):
    env = {**os.environ, "ROS_DOMAIN_ID": str(ros.domain_id)}
    reader = subprocess.Popen([sys.executable, "-c", READER], env=env)
    try:
        node = ros.add(Node("acks_writer"))
        pub = node.create_publisher(String, "acks", RELIABLE)
        wait_for(lambda: pub.get_subscription_count() == 1, 60.0, "the reader")
        pub.publish(String(data="first"))
        assert wait_for_all_acked(pub, 60.0)                        # matched and acknowledging
        reader.send_signal(signal.SIGSTOP)
        pub.publish(String(data="x" * 100_000))
        assert not wait_for_all_acked(pub, 0.0)                     # asked once: not yet
        idle = node.create_publisher(String, "acks_idle", RELIABLE)  # nothing sent: nothing to wait for
        assert unacknowledged({"stopped": pub, "idle": idle}, 0.0) == ["stopped"]
        resumed = threading.Event()

        def resume() -> None:                                       # runs only while the wait lets it
            reader.send_signal(signal.SIGCONT)
            resumed.set()

        threading.Thread(target=resume, daemon=True).start()
        assert wait_for_all_acked(pub, 120.0) and resumed.is_set()
    finally:
        reader.kill()
        reader.wait()
