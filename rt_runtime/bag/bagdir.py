"""A bag's path on disk: the storage files it holds, and what is wrong with its metadata.yaml."""
from __future__ import annotations

from pathlib import Path

from rosbags.rosbag2 import ReaderError

from .errors import BagError

STORAGE_SUFFIXES = {".mcap": "mcap", ".db3": "sqlite3"}


def storage_files(path: Path) -> tuple[Path, list[Path]]:
    """(what rosbags should open, the storage files inside it)."""
    if not path.exists():
        raise BagError(f"bag {path}: no such file or directory")
    if path.is_file():
        if path.suffix not in STORAGE_SUFFIXES:
            raise BagError(f"bag {path}: expected a rosbag2 directory, .mcap or .db3 file; "
                           f"found a {path.suffix or 'suffix-less'} file")
        return path, [path]
    files = sorted(p for p in path.iterdir() if p.suffix in STORAGE_SUFFIXES)
    if (path / "metadata.yaml").exists():
        return path, files
    if len(files) == 1:  # a directory whose metadata.yaml was lost still holds a readable file
        return files[0], files
    raise BagError(f"bag {path}: expected metadata.yaml or one .mcap/.db3 file in the directory; "
                   f"found {len(files)} storage files")


def about_metadata(error: ReaderError) -> bool:
    """Whether rosbags refused the bag for its metadata.yaml (not for its storage files)."""
    text = str(error).lower()
    return "metadata" in text or "yaml" in text


def metadata_problem(path: Path) -> str | None:
    """What makes a bag's metadata.yaml unusable before rosbags reads it: too big, not text, aliases
    that expand it without bound. None: leave the rest to rosbags (it names a syntax error itself)."""
    meta = path / "metadata.yaml"
    if not path.is_dir() or not meta.is_file():
        return None
    from ..config.yamlfile import ConfigError, parse_yaml_text, read_text_limited

    try:
        text = read_text_limited(meta, "a rosbag2 metadata.yaml")
    except ConfigError as e:
        return str(e).split(": ", 1)[1]
    if "*" not in text and "<<" not in text:
        return None   # no aliases: nothing to expand
    try:
        parse_yaml_text(text, "metadata.yaml")
    except ConfigError as e:
        why = str(e).split(": ", 1)[1]
        return why if "alias" in why or "nested" in why else None
    return None


def metadata_syntax(path: Path) -> str | None:
    """The line and what is wrong when metadata.yaml is not YAML (rosbags' own message spans lines)."""
    from ..config.yamlfile import ConfigError, parse_yaml_text, read_text_limited

    try:
        parse_yaml_text(read_text_limited(path / "metadata.yaml"), "metadata.yaml")
    except ConfigError as e:
        return str(e).split(": ", 1)[1]
    return None


def expected_count(path: Path) -> int | None:
    """The message count a bag directory's metadata.yaml promises; None: no such file, or unreadable."""
    meta = path / "metadata.yaml" if path.is_dir() else None
    if meta is None or not meta.exists():
        return None
    try:
        from ruamel.yaml import YAML
        return int(YAML(typ="safe").load(meta.read_text())["rosbag2_bagfile_information"]["message_count"])
    except Exception:
        return None
