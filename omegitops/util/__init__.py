"""Utilities below everything: errors, times, quantities, files, copying, garbage-collector
pauses, optional extras.
"""
