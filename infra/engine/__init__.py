"""The real Terraform engine and the Go programs the platform builds: OpenTofu and the local cluster's programs from
their pinned Go modules (`build.py`, `go/`), the google, kubernetes and helm providers from their checked sources
(`providers.py`), and OpenTofu run on a synthesized stack (`tofu.py`)."""
