"""The upstreams' issue templates, verbatim (2026-08): Megatron-LM's Markdown templates
(`.github/ISSUE_TEMPLATE/*.md` at main d98e8a64, the same at the pin) and Megatron-Bridge's
issue forms (`*.yml` at the pin, the same at main 067f987d); NeMo-RL has none. Copied, not read
from 3rdparty/, so the tests run where the checkouts are stand-ins without `.github/` (CI)."""

# Megatron-LM .github/ISSUE_TEMPLATE/bug_report.md
MLM_BUG = """\
---
name: Bug report
about: Create a report to help us improve the repository or project
title: ""
labels: bug
assignees: ''

---

**Describe the bug**

A clear and concise description of what the bug is. Tag @NVIDIA/mcore-oncall
to get oncall's attention to this issue.

**Steps/Code to reproduce bug**

Please list *minimal* steps or code snippet for us to be able to reproduce the bug.

A helpful guide on on how to craft a minimal bug report http://matthewrocklin.com/blog/work/2018/02/28/minimal-bug-reports.


**Expected behavior**

A clear and concise description of what you expected to happen.


**Additional context**

Add any other context about the problem here.
"""

# Megatron-LM .github/ISSUE_TEMPLATE/feature_request.md
MLM_FEATURE = """\
---
name: Feature request
about: Suggest an idea for this project
title: ""
labels: enhancement
assignees: ''

---

**Is your feature request related to a problem? Please describe.**
A clear and concise description of what the problem is. Ex. I'm always frustrated when [...]

Tag @NVIDIA/mcore-oncall
to get oncall's attention to this issue.

**Describe the solution you'd like**
A clear and concise description of what you want to happen.

**Describe alternatives you've considered**
A clear and concise description of any alternative solutions or features you've considered.

**Additional context**
Add any other context or screenshots about the feature request here.
"""

# Megatron-LM .github/ISSUE_TEMPLATE/question.md
MLM_QUESTION = """\
---
name: QUESTION
about: Ask a question about Megatron-LM that is not a bug, regression or enhancement
  request
title: "[QUESTION]"
labels: ''
assignees: ''

---

**Your question**
Ask a clear and concise question about Megatron-LM. Tag @NVIDIA/mcore-oncall
to get oncall's attention to this issue.
"""

# Megatron-Bridge .github/ISSUE_TEMPLATE/bug_report.yml
BRIDGE_BUG = """\
name: Bug report
description: Report incorrect behavior, regressions, or broken workflows in Megatron Bridge.
title: "[bug] "
labels:
  - bug
  - needs-triage
body:
  - type: markdown
    attributes:
      value: |
        Thanks for taking the time to file a bug report. Please keep the report focused and include the smallest repro you can share.

        **If you already have a proposed fix, please open a PR alongside this issue.** We can discuss the solution there and help get it merged.
  - type: textarea
    id: problem
    attributes:
      label: Problem
      description: What is broken?
      placeholder: Describe the incorrect behavior, regression, or failure mode.
    validations:
      required: true
  - type: textarea
    id: minimal-repro
    attributes:
      label: Minimal repro
      description: Provide the smallest steps, command, or code snippet that reproduces the problem.
      placeholder: |
        1. Run ...
        2. Use config ...
        3. Observe ...
      render: shell
    validations:
      required: true
  - type: textarea
    id: expected-behavior
    attributes:
      label: Expected behavior
      description: What did you expect to happen instead?
      placeholder: Describe the expected output or behavior.
    validations:
      required: true
  - type: dropdown
    id: affected-area
    attributes:
      label: Affected area
      description: Choose the closest primary area.
      options:
        - area:model
        - area:recipe
        - area:training
        - area:data
        - area:ckpt
        - area:peft
        - area:perf
        - area:build
        - area:misc
        - unsure
    validations:
      required: true
  - type: dropdown
    id: regression
    attributes:
      label: Regression?
      description: Did this work in an earlier version, branch, or commit?
      options:
        - "Yes"
        - "No"
        - Not sure
    validations:
      required: true
  - type: textarea
    id: environment
    attributes:
      label: Environment
      description: Include the commit or branch, container, GPU or CPU setup, and any relevant package versions.
      placeholder: |
        Branch / commit:
        Container or environment:
        GPU / machine:
        Python / CUDA / PyTorch:
  - type: textarea
    id: logs
    attributes:
      label: Logs
      description: Paste the relevant traceback, assertion, or CI log snippet if available.
      render: shell
"""

# Megatron-Bridge .github/ISSUE_TEMPLATE/feature_request.yml
BRIDGE_FEATURE = """\
name: Feature request
description: Propose a new capability or enhancement for Megatron Bridge.
title: "[feature] "
labels:
  - feature
  - needs-triage
body:
  - type: markdown
    attributes:
      value: |
        Use this form for new functionality, enablement work, or product improvements. Keep the request focused on the user problem and desired outcome.

        **If you already have a proposed solution, please open a PR alongside this issue.** We can discuss the implementation there and help get it merged.
  - type: textarea
    id: user-problem
    attributes:
      label: User problem
      description: What pain point or limitation are you trying to solve?
      placeholder: Describe the concrete problem you are facing today.
    validations:
      required: true
  - type: textarea
    id: desired-outcome
    attributes:
      label: Desired outcome
      description: What should happen if this request is addressed?
      placeholder: Describe the desired workflow, behavior, or capability.
    validations:
      required: true
  - type: textarea
    id: alternatives
    attributes:
      label: Alternatives considered
      description: What workarounds, competing designs, or other options have you considered?
      placeholder: List any alternatives or partial workarounds you already evaluated.
  - type: dropdown
    id: affected-area
    attributes:
      label: Affected area
      description: Choose the closest primary area.
      options:
        - area:model
        - area:recipe
        - area:training
        - area:data
        - area:ckpt
        - area:peft
        - area:perf
        - area:build
        - area:misc
        - unsure
    validations:
      required: true
  - type: dropdown
    id: urgency
    attributes:
      label: Urgency / use case
      description: How should maintainers think about the urgency of this request?
      options:
        - Blocking current work
        - Important but not blocking
        - Nice to have
        - Exploratory / long-term
    validations:
      required: true
  - type: textarea
    id: extra-context
    attributes:
      label: Extra context
      description: Add examples, links, screenshots, or related issues if helpful.
"""
