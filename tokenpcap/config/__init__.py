"""Configuration: YAML profiles → frozen typed objects (the only place units are converted), and NIC addresses.

Modules: :mod:`~tokenpcap.config.yamlfile` (one YAML file read safely: size, encoding, duplicate
keys, aliases), :mod:`~tokenpcap.config.yamlcheck` (checkers that turn YAML values into typed values),
:mod:`~tokenpcap.config.types` (the frozen profile objects), :mod:`~tokenpcap.config.bounds`
(upper bounds of values and their sources), :mod:`~tokenpcap.config.model_profile` and
:mod:`~tokenpcap.config.cluster_profile` (the model and cluster loaders),
:mod:`~tokenpcap.config.fabric` and :mod:`~tokenpcap.config.fabric_presets` (a cluster's
``fabric:``: switches, PFC, ECMP, and the sizes of its topology),
:mod:`~tokenpcap.config.profiles` (the scenario loader; the import other stages use),
:mod:`~tokenpcap.config.feasibility` (what cannot be combined),
:mod:`~tokenpcap.config.spectable` (docs/profiles.md), :mod:`~tokenpcap.config.pipeline`
(Megatron's pipeline layer split), :mod:`~tokenpcap.config.addresses` (MAC, IP, LID and GID of
every NIC).
"""
