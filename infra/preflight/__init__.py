"""The preflight's checks with the user's credentials (scripts/preflight.py is its command, and checks the tools):
`transport` reaches Google Cloud or recorded answers, `quota` reads what the node pools ask of each quota, `checks`
runs the credentials, APIs, roles and quota checks in order; each gives a `result.Result`."""
