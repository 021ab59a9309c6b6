"""``python -m tokenpcap`` runs the command line."""
from tokenpcap.cli import main

if __name__ == "__main__":  # pragma: no cover
    main()
