"""Play a bag and run the runtime under the bag's time. Equivalent commands:

    rt-runtime play BAG --clock --rate RATE --wait-for-subscriber 60 &
    rt-runtime run --use-sim-time --params-file config/ros_params.yaml --config CONFIG

Launch arguments: ``bag`` (required), ``rate`` (default 1.0), ``config`` and ``params_file`` (as in
runtime.launch.py). The player waits for the node's subscriptions before it starts, and when the
bag ends the whole launch shuts down: the node stops cleanly (released jobs publish, the trace is
written).
"""
import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, EmitEvent, RegisterEventHandler
from launch.event_handlers import OnProcessExit
from launch.events import Shutdown
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node


def generate_launch_description() -> LaunchDescription:
    """The player (with /clock) and the runtime node on sim time."""
    share = get_package_share_directory("rt_runtime")
    player = Node(
        package="rt_runtime",
        executable="player",
        name="rt_runtime_player",
        output="screen",
        arguments=[LaunchConfiguration("bag"), "--clock", "--rate", LaunchConfiguration("rate"),
                   "--wait-for-subscriber", "60"],
    )
    runtime = Node(
        package="rt_runtime",
        executable="runtime_node",
        name="rt_runtime",
        output="screen",
        parameters=[LaunchConfiguration("params_file"),
                    {"config": LaunchConfiguration("config"), "use_sim_time": True}],
    )
    return LaunchDescription([
        DeclareLaunchArgument("bag", description="rosbag2 folder, .mcap or .db3 to play"),
        DeclareLaunchArgument("rate", default_value="1.0", description="playback speed factor"),
        DeclareLaunchArgument("config", default_value=os.path.join(share, "config", "stack.yaml"),
                              description="stack configuration (tasks, graphs, topics)"),
        DeclareLaunchArgument("params_file", default_value=os.path.join(share, "config", "ros_params.yaml"),
                              description="ROS parameters of the node"),
        runtime,
        player,
        RegisterEventHandler(OnProcessExit(target_action=player, on_exit=[EmitEvent(event=Shutdown())])),
    ])
