"""From the environment files to the stacks: `load` reads each file and holds it to the model and to the rules of
the real systems; `app` synthesizes every environment's stacks (`python -m infra`)."""
