"""What a pull request will do: the base commit's state, the forecast (the real passes on a
simulated copy, at the job's cadence), the fleet's sizing, and the plan document.
"""
