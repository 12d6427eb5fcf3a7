"""The install order: dependsOn, installsAfter, overrideFeatureInstallOrder.

The cases under fixtures/features/order and their expected orders are the devcontainers
CLI's own (src/test/container-features/containerFeaturesOrder.test.ts, MIT licence).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path

import pytest

from cloister_core.devcontainer import (
    Feature,
    FeatureError,
    ResolvedFeature,
    install_order,
    load_devcontainer,
    missing_dependencies,
    parse_feature_metadata,
)
from cloister_core.devcontainer.features import resolve_local_feature

ORDER = Path(__file__).parent / "fixtures" / "features" / "order"

Options = Mapping[str, str | bool]


def _local(feature_id: str, options: Options, config: Path, project: Path) -> ResolvedFeature:
    folder = resolve_local_feature(feature_id, config, project)
    text = (folder / "devcontainer-feature.json").read_text()
    metadata = parse_feature_metadata(text, str(folder / "devcontainer-feature.json"))
    digest = "sha256:" + hashlib.sha256(text.encode()).hexdigest()
    return ResolvedFeature(Feature(feature_id, options, True, "local", folder), metadata, digest)


def _cli_case(case: str, tmp_path: Path) -> list[tuple[str, dict[str, str | bool]]]:
    """Load the case's devcontainer.json, fetch dependencies as the CLI side does, order."""
    project = ORDER / case
    config = project / ".devcontainer" / "devcontainer.json"
    loaded = load_devcontainer(config, project_root=project, home=tmp_path, environ={})
    resolved = [_local(f.id, f.options, config, project) for f in loaded.features]
    while missing := missing_dependencies(resolved):
        resolved += [_local(name, options, config, project) for name, options in missing]
    ordered = install_order(resolved, loaded.override_feature_order, where=config)
    return [(item.feature.id, dict(item.feature.options)) for item in ordered]


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("installsAfter/local-simple", [("./c", {"magicNumber": "321"}), ("./a", {})]),
        ("dependsOn/local-simple", [("./b", {"magicNumber": "50"}), ("./a", {})]),
        (
            "dependsOn/local-with-options",
            [
                ("./b", {}),
                ("./b", {"optA": "a", "optB": "a"}),
                ("./b", {"optA": "a", "optB": "b"}),
                ("./b", {"optA": "b", "optB": "a"}),
                ("./b", {"optA": "b", "optB": "b"}),
                ("./d", {}),
                ("./e", {}),
                ("./c", {}),
                ("./a", {"optA": "a", "optB": "b"}),
            ],
        ),
        (
            "dependsOn-and-installsAfter/local-simple",
            [("./c", {"magicNumber": "321"}), ("./a", {})],
        ),
        (
            "overrideFeatureInstallOrder/local-simple",
            [("./c", {}), ("./b", {}), ("./d", {}), ("./a", {})],
        ),
        (
            "overrideFeatureInstallOrder/local-intermediate",
            [("./c", {}), ("./d", {}), ("./b", {}), ("./a", {})],
        ),
        (
            "overrideFeatureInstallOrder/local-roundPriority",
            [("./a", {}), ("./b", {}), ("./c", {})],
        ),
    ],
)
def test_the_cli_cases(
    case: str, expected: list[tuple[str, dict[str, str | bool]]], tmp_path: Path
) -> None:
    assert _cli_case(case, tmp_path) == expected


@pytest.mark.parametrize(
    ("case", "left"),
    [("dependsOn/invalid-circular", "'./b'"), ("installsAfter/invalid-circular", "'./a'")],
)
def test_cycles_are_errors_naming_the_features(case: str, left: str, tmp_path: Path) -> None:
    with pytest.raises(FeatureError, match="make a cycle; left to install: ") as caught:
        _cli_case(case, tmp_path)
    assert left in str(caught.value)
    assert str(caught.value).startswith(str(ORDER / case / ".devcontainer" / "devcontainer.json"))


# The digests of ghcr.io/codspace/dependson/*, as the CLI's test expects them.
CODSPACE = {
    "a": "932027ef71da186210e6ceb3294c3459caaf6b548d2b547d5d26be3fc4b2264a",
    "b": "e7e6b52884ae7f349baf207ac59f78857ab64529c890b646bb0282f962bb2941",
    "c": "db651708398b6d7af48f184c358728eaaf959606637133413cb4107b8454a868",
    "d": "3795caa1e32ba6b30a08260039804eed6f3cf40811f0c65c118437743fa15ce8",
    "e": "9f36f159c70f8bebff57f341904b030733adb17ef12a5d58d4b3d89b2a6c7d5a",
}


def _codspace(feature_id: str, options: Options) -> ResolvedFeature:
    name = feature_id.rsplit("/", 1)[1].lower()
    path = ORDER / "oci-dependson" / f"{name.upper()}.json"
    metadata = parse_feature_metadata(path.read_text(), str(path))
    return ResolvedFeature(Feature(feature_id, options, True), metadata, f"sha256:{CODSPACE[name]}")


def test_the_cli_oci_case() -> None:
    # dependsOn/oci-ab: the same Feature (one digest) installs twice, with two options.
    resolved = [
        _codspace("ghcr.io/codspace/dependson/b", {"magicNumber": "400"}),
        _codspace("ghcr.io/codspace/dependson/a", {"magicNumber": "10"}),
    ]
    rounds = 0
    while missing := missing_dependencies(resolved):
        resolved += [_codspace(name, options) for name, options in missing]
        rounds += 1
    assert rounds == 2  # b needs C and D; C needs A (with other options) and E
    ordered = install_order(resolved, ())
    assert [(item.feature.id, dict(item.feature.options)) for item in ordered] == [
        ("ghcr.io/codspace/dependson/D", {"magicNumber": "30"}),
        ("ghcr.io/codspace/dependson/E", {"magicNumber": "50"}),
        ("ghcr.io/codspace/dependson/a", {"magicNumber": "10"}),
        ("ghcr.io/codspace/dependson/A", {"magicNumber": "40"}),
        ("ghcr.io/codspace/dependson/C", {"magicNumber": "20"}),
        ("ghcr.io/codspace/dependson/b", {"magicNumber": "400"}),
    ]


def _oci(
    feature_id: str,
    digest: str,
    options: Options | None = None,
    **metadata: object,
) -> ResolvedFeature:
    name = feature_id.partition(":")[0].partition("@")[0].rsplit("/", 1)[1]
    text = json.dumps({"id": name, **metadata})
    return ResolvedFeature(
        Feature(feature_id, options or {}, True),
        parse_feature_metadata(text, feature_id),
        "sha256:" + digest * 64,
    )


def _ids(ordered: list[ResolvedFeature]) -> list[str]:
    return [item.feature.id for item in ordered]


def test_installs_after_matches_any_version_and_only_what_is_present() -> None:
    features = [
        _oci(
            "ghcr.io/devcontainers/features/python:1",
            "1",
            installsAfter=[
                "ghcr.io/devcontainers/features/common-utils",  # present, in another version
                "ghcr.io/devcontainers/features/oryx",  # absent: no effect
            ],
        ),
        _oci("ghcr.io/devcontainers/features/common-utils:2", "2"),
        _oci("ghcr.io/devcontainers/features/aaa:1", "3"),
    ]
    assert _ids(install_order(features, ())) == [
        "ghcr.io/devcontainers/features/aaa:1",
        "ghcr.io/devcontainers/features/common-utils:2",
        "ghcr.io/devcontainers/features/python:1",
    ]


def test_installs_after_matches_a_renamed_feature_by_its_legacy_ids() -> None:
    features = [
        _oci("ghcr.io/x/f/aaa:1", "1", installsAfter=["ghcr.io/x/f/nodejs"]),
        _oci("ghcr.io/x/f/node:1", "2", legacyIds=["nodejs"]),
    ]
    assert _ids(install_order(features, ())) == ["ghcr.io/x/f/node:1", "ghcr.io/x/f/aaa:1"]


def test_within_a_round_the_order_is_the_clis() -> None:
    features = [
        _oci("ghcr.io/z/f/b:1", "1"),
        _oci("ghcr.io/a/f/z:1", "2"),
        _oci("ghcr.io/z/f/a:2", "3"),
        _oci("ghcr.io/z/f/a:10", "4"),
    ]
    # Registry and namespace, then the name, then the tag (as text, as the CLI compares).
    assert _ids(install_order(features, ())) == [
        "ghcr.io/a/f/z:1",
        "ghcr.io/z/f/a:10",
        "ghcr.io/z/f/a:2",
        "ghcr.io/z/f/b:1",
    ]


def test_override_order_is_a_priority_among_the_features_ready() -> None:
    features = [
        _oci("ghcr.io/x/f/a:1", "1"),
        _oci("ghcr.io/x/f/b:1", "2", dependsOn={"ghcr.io/x/f/c:1": {}}),
        _oci("ghcr.io/x/f/c:1", "3"),
    ]
    # b is not ready in the first round (c is not installed): a, the next in the list, is.
    assert _ids(install_order(features, ["ghcr.io/x/f/b", "ghcr.io/x/f/a"])) == [
        "ghcr.io/x/f/a:1",
        "ghcr.io/x/f/c:1",
        "ghcr.io/x/f/b:1",
    ]
    assert _ids(install_order(features, ["ghcr.io/x/f/c"])) == [
        "ghcr.io/x/f/c:1",
        "ghcr.io/x/f/a:1",
        "ghcr.io/x/f/b:1",
    ]


def test_the_same_feature_twice_installs_once() -> None:
    features = [
        _oci("ghcr.io/x/f/a:1", "1", {"v": "1"}),
        _oci("GHCR.IO/x/f/a:1.0", "1", {"v": "1"}),  # another spelling, the same content
        _oci("ghcr.io/x/f/b:1", "2", dependsOn={"ghcr.io/x/f/a:1.0": {"v": "1"}}),
    ]
    assert missing_dependencies(features) == []
    assert _ids(install_order(features, ())) == ["ghcr.io/x/f/a:1", "ghcr.io/x/f/b:1"]


def test_missing_dependencies_are_named_once_with_their_options() -> None:
    features = [
        _oci("ghcr.io/x/f/a:1", "1", dependsOn={"ghcr.io/x/f/c:1": {"v": "2"}}),
        _oci("ghcr.io/x/f/b:1", "2", dependsOn={"ghcr.io/x/f/c:1": {"v": "2"}}),
        _oci("ghcr.io/x/f/c:1", "3"),  # present, but not with those options
    ]
    assert missing_dependencies(features) == [("ghcr.io/x/f/c:1", {"v": "2"})]
    with pytest.raises(FeatureError, match=r"depends on 'ghcr.io/x/f/c:1' .* not resolved"):
        install_order(features, ())


def test_a_dependency_that_is_no_reference_is_an_error() -> None:
    features = [_oci("ghcr.io/x/f/a:1", "1", dependsOn={"https://example.com/x.tgz": {}})]
    with pytest.raises(FeatureError, match="tarball URL") as caught:
        missing_dependencies(features)
    assert str(caught.value).startswith("ghcr.io/x/f/a:1 devcontainer-feature.json")


def test_an_override_entry_that_is_no_reference_orders_nothing() -> None:
    """The loader says why it is ignored (a retired short name, a tarball URL)."""
    features = [_oci("ghcr.io/x/f/b:1", "2"), _oci("ghcr.io/x/f/a:1", "1")]
    ordered = install_order(features, ["node"], where="devcontainer.json")
    assert [item.feature.id for item in ordered] == ["ghcr.io/x/f/a:1", "ghcr.io/x/f/b:1"]
