"""What the trusted parent and a runner process say to each other: the job, the runner's
events and statuses, and the channel a warm runner server forks runners through. Both sides
import it; neither imports the other."""
