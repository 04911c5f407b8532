"""The project's APIs, enabled by the stack itself."""

from __future__ import annotations

from constructs import Construct

from infra.catalogue.gcp_apis import FEATURE_APIS, api_of
from infra.cdk import TerraformResource
from infra.cdk.bindings import google


class ProjectApis(Construct):
    """One `google_project_service` per API, left on when the stack is destroyed.

    `depend_all(scope)` makes every Google resource under `scope` depend on the service of its own API
    (the cluster also on those of its features), so a first apply in a fresh project enables each API
    before Terraform or GKE calls it.
    """

    def __init__(self, scope: Construct, id_: str, *, project: str, apis: tuple[str, ...]) -> None:
        super().__init__(scope, id_)
        ps = google("project_service")
        self.services = {
            api: ps.ProjectService(
                self,
                api.split(".", 1)[0],
                project=project,
                service=api,
                disable_on_destroy=False,
                disable_dependent_services=False,
            )
            for api in apis
        }

    def depend_all(self, scope: Construct) -> None:
        for node in scope.node.find_all():
            if not isinstance(node, TerraformResource):
                continue
            api = api_of(node.terraform_resource_type)
            if api is None:
                continue
            apis = [api]
            if node.terraform_resource_type == "google_container_cluster":
                apis += [feature_api for feature_api, _ in FEATURE_APIS.values()]
            node.depends_on = [*(node.depends_on or []), *(self._ref(a) for a in apis)]

    def _ref(self, api: str) -> str:
        service = self.services[api]
        return f"{service.terraform_resource_type}.{service.friendly_unique_id}"
