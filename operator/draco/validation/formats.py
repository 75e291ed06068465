"""The string formats of the Kubernetes API: DNS labels and subdomains, label keys and
values, C identifiers, driver and pool names, node names, extended resource names, UUIDs
and interface addresses.

Each `is_*` function returns the list of problems (empty when the string is fine), worded
like apimachinery's `validation.Is*` helpers so the messages match the API server's. The
`check_*` functions wrap them into field errors at a path.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Final

from draco.api.constants import (
    DEVICE_MAX_ID_LENGTH,
    DNS_LABEL_MAX_LENGTH,
    DNS_SUBDOMAIN_MAX_LENGTH,
    DRIVER_NAME_MAX_LENGTH,
    POOL_NAME_MAX_LENGTH,
)
from draco.errors import FieldError
from draco.validation.fielderrors import FieldPath, invalid, required, too_long

__all__ = [
    "MORE_THAN_ONE_SLASH",
    "check_c_identifier",
    "check_device_name",
    "check_dns_label",
    "check_dns_subdomain",
    "check_driver_name",
    "check_fully_qualified_name",
    "check_interface_address",
    "check_label_name",
    "check_label_value",
    "check_node_name",
    "check_pool_name",
    "check_qualified_name",
    "check_uuid",
    "is_c_identifier",
    "is_dns1123_label",
    "is_dns1123_subdomain",
    "is_extended_resource_name",
    "is_label_value",
    "is_qualified_name",
]

_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_LABEL = re.compile(rf"^{_LABEL_FMT}$")
_DNS1123_SUBDOMAIN = re.compile(rf"^{_LABEL_FMT}(\.{_LABEL_FMT})*$")
_C_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_QUALIFIED_NAME_PART = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
_QUALIFIED_NAME_MAX_LENGTH = 63
_LABEL_VALUE_MAX_LENGTH = 63


def _max_len_msg(n: int) -> str:
    return f"must be no more than {n} characters"


def is_dns1123_label(value: str) -> list[str]:
    errs = []
    if len(value) > DNS_LABEL_MAX_LENGTH:
        errs.append(_max_len_msg(DNS_LABEL_MAX_LENGTH))
    if not _DNS1123_LABEL.fullmatch(value):
        errs.append(
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
            "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
            f"regex used for validation is '{_LABEL_FMT}')"
        )
    return errs


def is_dns1123_subdomain(value: str) -> list[str]:
    errs = []
    if len(value) > DNS_SUBDOMAIN_MAX_LENGTH:
        errs.append(_max_len_msg(DNS_SUBDOMAIN_MAX_LENGTH))
    if not _DNS1123_SUBDOMAIN.fullmatch(value):
        errs.append(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
            "or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "
            f"regex used for validation is '{_LABEL_FMT}(\\.{_LABEL_FMT})*')"
        )
    return errs


def is_c_identifier(value: str) -> list[str]:
    if _C_IDENTIFIER.fullmatch(value):
        return []
    return [
        "a valid C identifier must start with alphabetic character or '_', followed by a string of "
        "alphanumeric characters or '_' (e.g. 'my_name',  or 'MY_NAME',  or 'MyName', regex used for "
        "validation is '[A-Za-z_][A-Za-z0-9_]*')"
    ]


def is_qualified_name(value: str) -> list[str]:
    """A label key or condition type: ``[prefix/]name``, prefix a DNS subdomain."""
    errs: list[str] = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs.extend(f"prefix part {m}" for m in is_dns1123_subdomain(prefix))
    else:
        return [
            "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start "
            "and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex "
            "used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS "
            "subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > _QUALIFIED_NAME_MAX_LENGTH:
        errs.append(f"name part {_max_len_msg(_QUALIFIED_NAME_MAX_LENGTH)}")
    if name and not _QUALIFIED_NAME_PART.fullmatch(name):
        errs.append(
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
            "with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
            "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
        )
    return errs


def is_label_value(value: str) -> list[str]:
    errs = []
    if len(value) > _LABEL_VALUE_MAX_LENGTH:
        errs.append(_max_len_msg(_LABEL_VALUE_MAX_LENGTH))
    if not _LABEL_VALUE.fullmatch(value):
        errs.append(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
            "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
            "'my_value',  or '12345', regex used for validation is "
            "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
        )
    return errs


def is_extended_resource_name(name: str) -> bool:
    """A pod resource name that is not native: it has a domain outside `kubernetes.io`, does
    not start with `requests.`, and `requests.<name>` is a qualified name."""
    if "/" not in name or "kubernetes.io/" in name or name.startswith("requests."):
        return False
    return not is_qualified_name(f"requests.{name}")


# --- field-level checks -------------------------------------------------------------------


def _from_msgs(path: FieldPath, value: str, msgs: list[str]) -> list[FieldError]:
    return [invalid(path, value, m) for m in msgs]


def check_dns_label(value: str, path: FieldPath) -> list[FieldError]:
    return _from_msgs(path, value, is_dns1123_label(value))


def check_dns_subdomain(value: str, path: FieldPath) -> list[FieldError]:
    return _from_msgs(path, value, is_dns1123_subdomain(value))


def check_device_name(value: str, path: FieldPath) -> list[FieldError]:
    """Device, request and counter names are DNS labels (an empty one is Required)."""
    if not value:
        return [required(path)]
    return check_dns_label(value, path)


def check_c_identifier(value: str, path: FieldPath) -> list[FieldError]:
    errs: list[FieldError] = []
    if len(value) > DEVICE_MAX_ID_LENGTH:
        errs.append(too_long(path, DEVICE_MAX_ID_LENGTH))
    errs.extend(_from_msgs(path, value, is_c_identifier(value)))
    return errs


def check_label_name(value: str, path: FieldPath) -> list[FieldError]:
    """A label key, taint key or condition type (an empty one is invalid, not missing)."""
    return _from_msgs(path, value, is_qualified_name(value))


def check_label_value(value: str, path: FieldPath) -> list[FieldError]:
    return _from_msgs(path, value, is_label_value(value))


def check_driver_name(value: str, path: FieldPath) -> list[FieldError]:
    """Driver names follow the CSI driver-name rules: at most 63 characters, a DNS
    subdomain when lower-cased."""
    if not value:
        return [required(path)]
    errs: list[FieldError] = []
    if len(value) > DRIVER_NAME_MAX_LENGTH:
        errs.append(too_long(path, DRIVER_NAME_MAX_LENGTH))
    errs.extend(_from_msgs(path, value, is_dns1123_subdomain(value.lower())))
    return errs


def check_pool_name(value: str, path: FieldPath) -> list[FieldError]:
    """Pool names: at most 253 characters, DNS subdomains joined by `/`."""
    if not value:
        return [required(path)]
    errs: list[FieldError] = []
    if len(value) > POOL_NAME_MAX_LENGTH:
        errs.append(too_long(path, POOL_NAME_MAX_LENGTH))
    for part in value.split("/"):
        errs.extend(check_dns_subdomain(part, path))
    return errs


def check_node_name(value: str, path: FieldPath) -> list[FieldError]:
    return check_dns_subdomain(value, path)


#: Kubernetes 1.38 (kubernetes/kubernetes#141644): a qualified name has at most one slash.
MORE_THAN_ONE_SLASH: Final = "must not contain more than one slash"


def check_qualified_name(value: str, path: FieldPath) -> list[FieldError]:
    """Attribute and capacity names: ``<C identifier>`` or ``<driver-like domain>/<C identifier>``.

    A name with more than one slash is refused, as Kubernetes 1.38 refuses it (kube-apiserver
    1.37 checked nothing there); a stored one is kept while its object's list of devices
    does not change (`draco.validation.slices`)."""
    parts = value.split("/")
    if len(parts) == 1:
        return check_c_identifier(parts[0], path)
    if len(parts) == 2:
        errs: list[FieldError] = []
        if not parts[0]:
            errs.append(invalid(path, "", "the domain must not be empty"))
        else:
            errs.extend(check_driver_name(parts[0], path))
        if not parts[1]:
            errs.append(invalid(path, "", "the name must not be empty"))
        else:
            errs.extend(check_c_identifier(parts[1], path))
        return errs
    return [invalid(path, value, MORE_THAN_ONE_SLASH)]


def check_fully_qualified_name(value: str, path: FieldPath) -> list[FieldError]:
    errs = check_qualified_name(value, path)
    if "/" not in value:
        errs.append(
            invalid(path, value, "a fully qualified name must be a domain and a name separated by a slash")
        )
    return errs


def check_uuid(value: str, path: FieldPath) -> list[FieldError]:
    if not _UUID.fullmatch(value):
        return [invalid(path, value, "error validating uid: invalid UUID format")]
    if value != value.lower():
        return [
            invalid(
                path,
                value,
                "uid must be in RFC 4122 normalized form, `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` with "
                "lowercase hexadecimal characters",
            )
        ]
    return []


def check_interface_address(value: str, path: FieldPath) -> list[FieldError]:
    """An address in CIDR form that keeps its host bits (`192.0.2.5/24`), canonical."""
    try:
        iface = ipaddress.ip_interface(value)
    except ValueError:
        return [
            invalid(path, value, "must be a valid address in CIDR form, (e.g. 10.9.8.7/24 or 2001:db8::1/64)")
        ]
    if "/" not in value:
        return [
            invalid(path, value, "must be a valid address in CIDR form, (e.g. 10.9.8.7/24 or 2001:db8::1/64)")
        ]
    canonical = f"{iface.ip.compressed}/{iface.network.prefixlen}"
    if value != canonical:
        return [invalid(path, value, f'must be in canonical form ("{canonical}")')]
    return []
