"""The training recipe of models/pic-qa (not in CI); scripts run as
`python -m train.NAME` from the repository root."""
