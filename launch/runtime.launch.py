"""Launch the live runtime node. Equivalent command:

    rt-runtime run --params-file config/ros_params.yaml --config CONFIG

Launch arguments: ``config`` (the stack file; default the installed reference stack),
``params_file`` (default the installed config/ros_params.yaml), ``use_sim_time`` (default false;
true is ``rt-runtime run --use-sim-time``), ``speculate`` (default false; true is ``rt-runtime run
--speculate``: the planner plans ahead in slack time). Remap topics with ``remappings`` in an including launch
file, or set them in the stack file. SIGINT (what launch sends) stops the node cleanly.
"""
import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node
from launch_ros.parameter_descriptions import ParameterValue


def generate_launch_description() -> LaunchDescription:
    """The runtime node with its parameter file."""
    share = get_package_share_directory("rt_runtime")
    return LaunchDescription([
        DeclareLaunchArgument("config", default_value=os.path.join(share, "config", "stack.yaml"),
                              description="stack configuration (tasks, graphs, topics)"),
        DeclareLaunchArgument("params_file", default_value=os.path.join(share, "config", "ros_params.yaml"),
                              description="ROS parameters of the node"),
        DeclareLaunchArgument("use_sim_time", default_value="false", description="follow /clock"),
        DeclareLaunchArgument("speculate", default_value="false",
                              description="turn on the stack file's speculate: keys (docs/SAFETY.md)"),
        Node(
            package="rt_runtime",
            executable="runtime_node",
            name="rt_runtime",
            output="screen",
            parameters=[
                LaunchConfiguration("params_file"),
                {"config": LaunchConfiguration("config"),
                 "use_sim_time": ParameterValue(LaunchConfiguration("use_sim_time"), value_type=bool),
                 "speculate": ParameterValue(LaunchConfiguration("speculate"), value_type=bool)},
            ],
        ),
    ])
