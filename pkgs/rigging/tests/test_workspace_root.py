"""The workspace root kept within one command (``fixed_workspace_roots``) and looked for again after it."""

from __future__ import annotations

from rigging.config.workspace import find_workspace_root, fixed_workspace_roots


def test_a_command_walks_up_once_per_folder_and_a_later_one_sees_a_new_workspace(tmp_path):
    deep = tmp_path / "ws" / "a" / "b"
    deep.mkdir(parents=True)
    before = find_workspace_root(deep)
    assert before is None or not before.is_relative_to(tmp_path)
    with fixed_workspace_roots():
        assert find_workspace_root(deep) == before
        (tmp_path / "ws" / "pyproject.toml").write_text("[tool.uv.workspace]\nmembers = []\n")
        assert find_workspace_root(deep) == before  # kept while the command runs
        assert find_workspace_root(tmp_path / "ws" / "a") == (tmp_path / "ws").resolve()  # another folder: walked
        with fixed_workspace_roots():  # nested: the same command
            assert find_workspace_root(deep) == before
    assert find_workspace_root(deep) == (tmp_path / "ws").resolve()  # the next command looks again
    (tmp_path / "ws" / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    (tmp_path / "ws" / "a" / "config").mkdir()
    (tmp_path / "ws" / "a" / "config" / "marin.yaml").write_text("{}\n")
    # No workspace declared: the nearest folder with a project file or a config file.
    assert find_workspace_root(deep) == (tmp_path / "ws" / "a").resolve()
