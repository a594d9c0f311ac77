"""client/commands"""
