"""The host side of board builds: talking to the board over its serial link."""
