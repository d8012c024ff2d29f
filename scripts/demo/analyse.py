"""Rodon demo step: summarise a small dataset and chart it.

Runs inside the python image's gVisor sandbox with the workspace at
/workspace; reads sales.csv and writes summary.csv and chart.png next to it.
"""
import pandas as pd
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

df = pd.read_csv("sales.csv", parse_dates=["month"])
summary = df.groupby("region")["revenue"].agg(["sum", "mean", "max"]).sort_values("sum", ascending=False)
print("Revenue by region:")
print(summary.to_string(float_format=lambda v: f"{v:,.0f}"))
summary.to_csv("summary.csv")

fig, ax = plt.subplots(figsize=(8, 4.5))
for region, rows in df.groupby("region"):
    ax.plot(rows["month"], rows["revenue"], marker="o", label=region)
ax.set_title("Monthly revenue by region")
ax.set_ylabel("revenue")
ax.legend()
fig.autofmt_xdate()
fig.tight_layout()
fig.savefig("chart.png", dpi=100)
print("wrote chart.png and summary.csv")
