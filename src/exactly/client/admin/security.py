"""The admin client's security: ACLs (create, describe, delete by filter) and SCRAM credentials
(KIP-554: described by mechanism and iterations, never the credentials; set with a password
salted and hashed here, so that it never leaves the client).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from exactly.client.admin.base import AdminBase, item_error, raise_failures
from exactly.client.cluster import make_request, request_module
from exactly.client.errors import KafkaError
from exactly.client.types import (
    AclBinding,
    AclBindingFilter,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
    wire_enum,
)
from exactly.protocol.acls import AclOperation, AclPermissionType, PatternType, ResourceType
from exactly.protocol.apis import ApiKey, build


def _acl_text(a: AclBinding) -> str:
    return (f"{a.permission_type.name} {a.principal} from {a.host} {a.operation.name} on "
            f"{a.resource_type.name}:{a.pattern_type.name}:{a.resource_name}")


class SecurityAdmin(AdminBase):
    """ACLs and SCRAM credentials."""

    async def create_acls(self, acls: Iterable[AclBinding]) -> None:
        acls = list(acls)
        conn = await self.cluster.any_connection()
        module = request_module(conn, ApiKey.CREATE_ACLS)
        response = await conn.send(make_request(conn, ApiKey.CREATE_ACLS, creations=tuple(
            build(module.AclCreation, resource_type=a.resource_type, resource_name=a.resource_name,
                  resource_pattern_type=a.pattern_type, principal=a.principal, host=a.host,
                  operation=a.operation, permission_type=a.permission_type) for a in acls)))
        raise_failures({a: e for a, r in zip(acls, response.results, strict=False)
                         if (e := item_error(f"create ACL {_acl_text(a)}", r.error_code,
                                              r.error_message))})

    async def describe_acls(self, acl_filter: AclBindingFilter | None = None) -> list[AclBinding]:
        wanted = acl_filter or AclBindingFilter()
        conn = await self.cluster.any_connection()
        response = await conn.send(make_request(
            conn, ApiKey.DESCRIBE_ACLS, resource_type_filter=wanted.resource_type,
            resource_name_filter=wanted.resource_name, pattern_type_filter=wanted.pattern_type,
            principal_filter=wanted.principal, host_filter=wanted.host, operation=wanted.operation,
            permission_type=wanted.permission_type))
        if (e := item_error("describe ACLs", response.error_code, response.error_message)):
            raise e
        return [AclBinding(wire_enum(ResourceType, r.resource_type), r.resource_name,
                           wire_enum(PatternType, r.pattern_type), a.principal, a.host,
                           wire_enum(AclOperation, a.operation),
                           wire_enum(AclPermissionType, a.permission_type))
                for r in response.resources for a in r.acls]

    async def delete_acls(self, filters: Iterable[AclBindingFilter]) -> list[AclBinding]:
        """Delete every ACL that matches one of the filters; returns the ACLs deleted."""
        filters = list(filters)
        conn = await self.cluster.any_connection()
        module = request_module(conn, ApiKey.DELETE_ACLS)
        response = await conn.send(make_request(conn, ApiKey.DELETE_ACLS, filters=tuple(
            build(module.DeleteAclsFilter, resource_type_filter=f.resource_type,
                  resource_name_filter=f.resource_name, pattern_type_filter=f.pattern_type,
                  principal_filter=f.principal, host_filter=f.host, operation=f.operation,
                  permission_type=f.permission_type) for f in filters)))
        deleted: list[AclBinding] = []
        failures: dict[Any, KafkaError] = {}
        for i, r in enumerate(response.filter_results):
            if (e := item_error("delete ACLs", r.error_code, r.error_message)) is not None:
                failures[i] = e
                continue
            for a in r.matching_acls:
                binding = AclBinding(wire_enum(ResourceType, a.resource_type), a.resource_name,
                                     wire_enum(PatternType, a.pattern_type), a.principal, a.host,
                                     wire_enum(AclOperation, a.operation),
                                     wire_enum(AclPermissionType, a.permission_type))
                if (e := item_error(f"delete ACL {_acl_text(binding)}", a.error_code,
                                     a.error_message)) is not None:
                    failures[binding] = e
                else:
                    deleted.append(binding)
        raise_failures(failures)
        return deleted

    async def describe_user_scram_credentials(self, users: Iterable[str] | None = None
                                              ) -> dict[str, list[ScramCredentialInfo]]:
        """Each user's SCRAM mechanisms and iteration counts (never the credentials); every
        user that has one when `users` is None."""
        conn = await self.cluster.any_connection()
        module = request_module(conn, ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS)
        wanted = None if users is None else tuple(build(module.UserName, name=u) for u in users)
        response = await conn.send(make_request(conn, ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
                                                users=wanted))
        if (e := item_error("describe SCRAM credentials", response.error_code,
                             response.error_message)):
            raise e
        out: dict[str, list[ScramCredentialInfo]] = {}
        failures: dict[str, KafkaError] = {}
        for r in response.results:
            if (e := item_error(f"describe SCRAM credentials of {r.user!r}", r.error_code,
                                 r.error_message)) is not None:
                failures[r.user] = e
                continue
            out[r.user] = [ScramCredentialInfo(wire_enum(ScramMechanism, c.mechanism), c.iterations)
                           for c in r.credential_infos]
        raise_failures(failures)
        return out

    async def alter_user_scram_credentials(
            self, alterations: Iterable[UserScramCredentialUpsertion | UserScramCredentialDeletion]
    ) -> None:
        conn = await self.cluster.any_connection()
        module = request_module(conn, ApiKey.ALTER_USER_SCRAM_CREDENTIALS)
        upsertions, deletions = [], []
        for a in alterations:
            mechanism = ScramMechanism.parse(a.mechanism)
            if isinstance(a, UserScramCredentialDeletion):
                deletions.append(build(module.ScramCredentialDeletion, name=a.user,
                                       mechanism=mechanism))
                continue
            salt = a.salt if a.salt is not None else os.urandom(32)
            upsertions.append(build(module.ScramCredentialUpsertion, name=a.user,
                                    mechanism=mechanism, iterations=a.iterations, salt=salt,
                                    salted_password=a.salted_password(salt)))
        response = await conn.send(make_request(conn, ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
                                                deletions=tuple(deletions),
                                                upsertions=tuple(upsertions)))
        raise_failures({r.user: e for r in response.results
                         if (e := item_error(f"alter SCRAM credentials of {r.user!r}",
                                              r.error_code, r.error_message))})
