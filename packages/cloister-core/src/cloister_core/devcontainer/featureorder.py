"""The order Features install in, as the specification and the devcontainers CLI do it.

- ``dependsOn`` is a hard dependency on a Feature *with those options*: it installs
  first, and it is installed even if devcontainer.json does not list it (the CLI fetches
  what :func:`missing_dependencies` names, then calls :func:`install_order` with all).
  Two Features are the same when their content digests and their options are equal (a
  local Feature: its folder and options), so one Feature may install twice with
  different options, as in the CLI.
- ``installsAfter`` is soft: it orders only among the Features present, and matches any
  version (the registry, namespace and name; or a name the Feature had before,
  ``legacyIds``).
- The installation goes in rounds: each round is every Feature whose dependencies are
  installed, cut to those with the highest priority (``overrideFeatureInstallOrder``:
  the first entry has the highest), sorted as the CLI sorts them (by reference, tag,
  options, digest). A round with nothing in it is a cycle: an error naming the Features.
"""

from __future__ import annotations

import functools
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cloister_core.devcontainer.featuremeta import FeatureError, OptionValue, ResolvedFeature
from cloister_core.devcontainer.features import (
    FeatureIdError,
    OciReference,
    is_local_id,
    parse_oci_reference,
)

Options = Mapping[str, OptionValue]

# ICU's root collation (JavaScript's localeCompare, which the CLI sorts with) puts
# punctuation first, in this order, then digits, then letters ignoring case.
_PUNCTUATION = "_-,;:!?.'\"()[]{}@*/\\&#%`^+<=>|~$"


def collation_key(text: str) -> tuple[tuple[tuple[int, int], ...], tuple[int, ...]]:
    """A sort key for *text* close to JavaScript's localeCompare (what the CLI sorts by)."""
    primary: list[tuple[int, int]] = []
    case: list[int] = []
    for character in text:
        if character.isspace():
            primary.append((0, 0))
        elif character in _PUNCTUATION:
            primary.append((1, _PUNCTUATION.index(character)))
        elif character.isdigit():
            primary.append((2, ord(character)))
        elif character.isalpha():
            primary.append((3, ord(character.lower())))
        else:
            primary.append((4, ord(character)))
        case.append(1 if character.isupper() else 0)
    return tuple(primary), tuple(case)


def _locale_compare(a: str, b: str) -> int:
    key_a, key_b = collation_key(a), collation_key(b)
    return (key_a > key_b) - (key_a < key_b)


def _options_compare(a: Options, b: Options) -> int:
    """The CLI's optionsCompareTo: fewer options first, then by name, then by value."""
    if len(a) != len(b):
        return len(a) - len(b)
    for key_a, key_b in zip(sorted(a), sorted(b), strict=True):
        if key_a != key_b:
            return _locale_compare(key_a, key_b)
        value_a, value_b = a[key_a], b[key_b]
        if isinstance(value_a, str) and isinstance(value_b, str):
            if (found := _locale_compare(value_a, value_b)) != 0:
                return found
        elif isinstance(value_a, bool) and isinstance(value_b, bool) and value_a != value_b:
            return 1 if value_a else -1
    return 0


def _reference_key(feature_id: str) -> str:
    """A Feature id as one text per reference: the OCI reference normalised, or the path."""
    if is_local_id(feature_id):
        return "local:" + posixpath.normpath(feature_id)
    return "oci:" + str(parse_oci_reference(feature_id))


@dataclass(eq=False)
class _Node:
    resolved: ResolvedFeature
    oci: OciReference | None
    local: str | None
    depends_on: list[_Node] = field(default_factory=list)
    installs_after: list[OciReference | str] = field(default_factory=list)
    priority: int = 0

    @property
    def options(self) -> Options:
        return self.resolved.feature.options

    def same(self, other: _Node) -> bool:
        """The CLI's equals: the same content (or folder) with the same options."""
        if (self.oci is None) != (other.oci is None) or dict(self.options) != dict(other.options):
            return False
        if self.oci is not None:
            return self.resolved.digest == other.resolved.digest
        return self.local == other.local

    def satisfies_soft(self, wanted: OciReference | str) -> bool:
        """Whether this Feature is what an installsAfter entry names, in any version."""
        if isinstance(wanted, str):
            return self.local == wanted
        if self.oci is None:
            return False
        if self.oci.resource == wanted.resource:
            return True
        names = {
            self.resolved.metadata.id.lower(),
            *map(str.lower, self.resolved.metadata.legacy_ids),
        }
        return (
            self.oci.registry == wanted.registry
            and self.oci.namespace == wanted.namespace
            and wanted.name in names
        )


def _soft_reference(feature_id: str) -> OciReference | str | None:
    if is_local_id(feature_id):
        return posixpath.normpath(feature_id)
    try:
        return parse_oci_reference(feature_id)
    except FeatureIdError:
        return None


def _node(resolved: ResolvedFeature) -> _Node:
    feature = resolved.feature
    if feature.kind == "local":
        return _Node(resolved, None, posixpath.normpath(feature.id))
    return _Node(resolved, parse_oci_reference(feature.id), None)


def _where(resolved: ResolvedFeature) -> str:
    return f"{resolved.feature.id} devcontainer-feature.json"


def missing_dependencies(
    resolved: Sequence[ResolvedFeature],
) -> list[tuple[str, Mapping[str, OptionValue]]]:
    """The ``dependsOn`` entries (id as written, options) no Feature of *resolved* is.

    A Feature of *resolved* is one when its id names the same reference (or folder) and
    its options are the same. The caller fetches these (a registry's only if trusted,
    like any Feature), adds them to *resolved* (``Feature.id`` the id as written here)
    and asks again until nothing is missing. A ``dependsOn`` id that is no Feature
    reference is a :class:`FeatureError`.
    """
    present = {
        (_reference_key(item.feature.id), tuple(sorted(item.feature.options.items())))
        for item in resolved
    }
    missing: list[tuple[str, Mapping[str, OptionValue]]] = []
    for item in resolved:
        for dependency, options in item.metadata.depends_on.items():
            try:
                key = (_reference_key(dependency), tuple(sorted(options.items())))
            except FeatureIdError as error:
                raise FeatureError(_where(item), f"dependsOn {dependency!r}: {error}") from None
            if key not in present:
                present.add(key)
                missing.append((dependency, dict(options)))
    return missing


def _compare(a: _Node, b: _Node) -> int:
    """The CLI's compareTo: the order of Features within one round."""
    if (a.oci is None) != (b.oci is None):
        return _locale_compare(a.resolved.feature.id, b.resolved.feature.id)
    if a.oci is None or b.oci is None:
        found = _locale_compare(a.local or "", b.local or "")
        return found if found != 0 else _options_compare(a.options, b.options)
    same_digest = a.resolved.digest == b.resolved.digest
    if same_digest and _options_compare(a.options, b.options) == 0:
        return 0
    prefix_a = f"{a.oci.registry}/{a.oci.namespace}"
    prefix_b = f"{b.oci.registry}/{b.oci.namespace}"
    if prefix_a != prefix_b:
        return _locale_compare(prefix_a, prefix_b)
    if a.oci.name != b.oci.name:
        return _locale_compare(a.oci.name, b.oci.name)
    if a.oci.tag and b.oci.tag and a.oci.tag != b.oci.tag:
        return _locale_compare(a.oci.tag, b.oci.tag)
    if (found := _options_compare(a.options, b.options)) != 0:
        return found
    return _locale_compare(a.resolved.digest, b.resolved.digest)


def install_order(
    features: Sequence[ResolvedFeature],
    override_order: Sequence[str],
    *,
    where: str | Path = "devcontainer.json",
) -> list[ResolvedFeature]:
    """*features* (those listed, then the dependencies) in the order they install.

    The same Feature with the same options given twice installs once. Errors are a
    :class:`FeatureError` at *where* (the devcontainer.json): a cycle (naming the
    Features left), a ``dependsOn`` not among *features* (the caller did not fetch what
    :func:`missing_dependencies` named), an ``overrideFeatureInstallOrder`` entry that is
    no Feature reference.
    """
    nodes = _graph(features, where)
    _prioritise(nodes, override_order, where)
    installed: list[_Node] = []
    worklist = list(nodes)
    while worklist:
        ready = [
            node
            for node in worklist
            if all(any(done.same(need) for done in installed) for need in node.depends_on)
            and all(
                any(done.satisfies_soft(after) for done in installed)
                for after in node.installs_after
            )
        ]
        if not ready:
            names = ", ".join(repr(node.resolved.feature.id) for node in worklist)
            raise FeatureError(
                where,
                f"the Features' dependsOn/installsAfter make a cycle; left to install: {names}",
            )
        top = max(node.priority for node in ready)
        ready = [node for node in ready if node.priority == top]
        worklist = [node for node in worklist if not any(node.same(done) for done in ready)]
        ready.sort(key=functools.cmp_to_key(_compare))
        installed.extend(ready)
    return [node.resolved for node in installed]


def _key(feature_id: str, options: Options) -> tuple[str, tuple[tuple[str, OptionValue], ...]]:
    return _reference_key(feature_id), tuple(sorted(options.items()))


def _graph(features: Sequence[ResolvedFeature], where: str | Path) -> list[_Node]:
    """One node per distinct Feature, with its hard and (present) soft dependencies."""
    nodes: list[_Node] = []
    by_reference: dict[tuple[str, tuple[tuple[str, OptionValue], ...]], _Node] = {}
    for item in features:
        node = _node(item)
        existing = next((other for other in nodes if node.same(other)), None)
        if existing is None:
            nodes.append(node)
        by_reference.setdefault(_key(item.feature.id, item.feature.options), existing or node)
    for node in nodes:
        for dependency, options in node.resolved.metadata.depends_on.items():
            try:
                found = by_reference.get(_key(dependency, options))
            except FeatureIdError as error:
                message = f"dependsOn {dependency!r}: {error}"
                raise FeatureError(_where(node.resolved), message) from None
            if found is None:
                raise FeatureError(
                    where,
                    f"Feature {node.resolved.feature.id!r} depends on {dependency!r} with"
                    f" options {dict(options)!r}, which was not resolved",
                )
            node.depends_on.append(found)
        for after in node.resolved.metadata.installs_after:
            wanted = _soft_reference(after)
            # Soft dependencies order only among the Features present.
            if wanted is not None and any(other.satisfies_soft(wanted) for other in nodes):
                node.installs_after.append(wanted)
    return nodes


def _prioritise(nodes: Sequence[_Node], override_order: Sequence[str], where: str | Path) -> None:
    """overrideFeatureInstallOrder: the first of N entries gives priority N, the last 1."""
    total = len(override_order)
    for index, entry in enumerate(override_order):
        wanted = _soft_reference(entry)
        if wanted is None:
            continue  # a tarball URL, say: the loader said why; it names nothing installed
        for node in nodes:
            if node.satisfies_soft(wanted):
                node.priority = max(node.priority, total - index)
