"""An account for the host user's uid in any image (pure: the image's files in, files out)."""

from __future__ import annotations

from cloister_cli.container.accounts import Accounts, host_user_name, with_user

DEBIAN = Accounts(
    passwd=(
        "root:x:0:0:root:/root:/bin/bash\n"
        "daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n"
        "cloister:x:1000:1000::/home/cloister:/bin/bash\n"
    ),
    group="root:x:0:\ndaemon:x:1:\ncloister:x:1000:\n",
)
HOME = "/home/cloister"


def users(accounts: Accounts) -> dict[str, list[str]]:
    return {line.split(":")[2]: line.split(":") for line in accounts.passwd.splitlines()}


def groups(accounts: Accounts) -> dict[str, list[str]]:
    return {line.split(":")[2]: line.split(":") for line in accounts.group.splitlines()}


def test_a_uid_the_image_lacks_gets_an_account_with_the_cloister_home() -> None:
    found = with_user(DEBIAN, uid=1001, gid=1001, name="alice", home=HOME)
    assert users(found)["1001"] == ["alice", "x", "1001", "1001", "Cloister", HOME, "/bin/bash"]
    assert groups(found)["1001"] == ["alice", "x", "1001", ""]
    assert found.passwd.startswith(DEBIAN.passwd)  # the image's own accounts stay


def test_the_images_own_account_for_the_uid_is_kept_with_the_cloister_home() -> None:
    image = Accounts(DEBIAN.passwd.replace("/home/cloister", "/home/dev"), DEBIAN.group)
    found = with_user(image, uid=1000, gid=1000, name="alice", home=HOME)
    assert users(found)["1000"][0] == "cloister"
    assert users(found)["1000"][5] == HOME
    assert found.group == DEBIAN.group
    assert len(found.passwd.splitlines()) == 3


def test_root_keeps_its_home() -> None:
    found = with_user(DEBIAN, uid=0, gid=0, name="root", home=HOME)
    assert found == DEBIAN


def test_a_name_the_image_gives_another_uid_is_not_taken() -> None:
    found = with_user(DEBIAN, uid=1001, gid=1001, name="cloister", home=HOME)
    assert users(found)["1001"][0] == "cloister-1001"
    assert groups(found)["1001"][0] == "cloister-1001"
    assert users(found)["1000"][0] == "cloister"


def test_an_image_without_accounts() -> None:
    found = with_user(Accounts("", ""), uid=1001, gid=100, name="bob", home=HOME)
    assert found.passwd == f"bob:x:1001:100:Cloister:{HOME}:/bin/bash\n"
    assert found.group == "bob:x:100:\n"


def test_malformed_lines_are_dropped() -> None:
    found = with_user(
        Accounts("garbage\n# comment\nroot:x:0:0:root:/root:/bin/sh\n", "bad\n"),
        uid=1001,
        gid=1001,
        name="bob",
        home=HOME,
    )
    assert "garbage" not in found.passwd
    assert "bad" not in found.group


def test_host_user_name_falls_back_for_unknown_or_odd_names() -> None:
    assert host_user_name(2**31 - 7) == "cloister"  # no such uid on the host
    assert host_user_name(0) == "root"
