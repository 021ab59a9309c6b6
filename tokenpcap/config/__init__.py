"""Configuration: YAML profiles → frozen typed objects (the only place units are converted), and NIC addresses.

Modules: :mod:`~tokenpcap.config.yamlfile` (one YAML file read safely: size, encoding, duplicate
keys, aliases), :mod:`~tokenpcap.config.yamlcheck` (checkers that turn YAML values into typed values),
:mod:`~tokenpcap.config.types` (the frozen profile objects), :mod:`~tokenpcap.config.profiles`
(the loaders), :mod:`~tokenpcap.config.addresses` (MAC, IP, LID and GID of every NIC).
"""
